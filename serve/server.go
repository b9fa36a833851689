package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/serve/servepb"
	"github.com/strata-gnn/strata/serve/shmring"
)

// ProtocolVersion is the protocol version of servepb this server speaks.
const ProtocolVersion = uint32(servepb.ProtocolVersion_PROTOCOL_VERSION_CURRENT)

// Capabilities a server lists in Info: the optional request kinds it
// serves (clients check them, since older servers ignore new fields).
const (
	CapLink  = "link"  // SampleRequest.link
	CapTyped = "typed" // SampleRequest.input_type (typed datasets only)
	// CapBFloat16: SampleRequest.feature_dtype DTYPE_BFLOAT16.
	CapBFloat16 = "bfloat16"
)

// SecretMetadata is the metadata key that carries the shared secret.
const SecretMetadata = "strata-secret"

// Limits on request fields that are not derived from the dataset.
const (
	MaxHops      = 16
	MaxFanout    = 1 << 20
	MaxWorld     = 1 << 16
	MaxBatchSize = 1 << 22
)

// Defaults of Options.
const (
	DefaultMaxSendBytes = 512 << 20
	DefaultMaxRecvBytes = 64 << 20
	DefaultPrefetch     = 4
	DefaultMaxPrefetch  = 64
	DefaultMaxWorkers   = 64
	DefaultMaxStreams   = 256
	DefaultMaxSamplers  = 8
	// DefaultWindowBytes is the initial HTTP/2 flow-control window of a
	// stream and of a connection (it disables gRPC's window growth, so a
	// stream's bytes in flight stay bounded).
	DefaultWindowBytes = 8 << 20
	// DefaultIOBufferBytes is the write buffer of a server's connections
	// and the read buffer of a relay's upstream ones: a batch of tens of
	// MiB went through gRPC's 32 KiB in a system call each (512 KiB: a
	// third less CPU time per relayed batch on the development VM).
	DefaultIOBufferBytes = 512 << 10
	// DefaultRingBytes bounds a SampleShm stream's ring.
	DefaultRingBytes = 2 << 30
	// DefaultReleaseTimeout is how long a SampleShm stream waits for its
	// client to release a slot: long, since a trainer may evaluate between
	// two batches; a dead client ends the stream at once anyway.
	DefaultReleaseTimeout = time.Hour
)

// Options configure a Server. Dataset is required; zero values of the
// others take the defaults above.
type Options struct {
	Dataset *dataset.Dataset
	// In is the in-adjacency to sample (nil: Dataset.InGraph()).
	In *graph.CSR
	// NewSamplers makes the samplers of one fanout list, one per device
	// (batch i of a stream uses sampler i mod len); nil samples on the CPU
	// with a sample.NeighborSampler. A sampler that implements
	// sample.HopSampler is used through SampleFrontier, any other through
	// its MiniBatches (FromMiniBatch). Samplers that implement io.Closer
	// are closed by Stop and Drain.
	NewSamplers func(fanouts []int, replace bool) ([]sample.Sampler, error)
	// Device names where sampling runs, for Info ("cpu" if empty).
	Device string

	MaxSendBytes int // largest reply message
	MaxRecvBytes int // largest request message
	Workers      int // batches a stream samples at once unless the request says (default 1)
	MaxWorkers   int
	Prefetch     int // batches a stream keeps ready unless the request says
	MaxPrefetch  int
	MaxStreams   int // Sample streams open at once
	MaxSamplers  int // distinct (fanouts, replace) configurations kept
	WindowBytes  int32
	// BF16TableBytes bounds the copy of the features rounded to bfloat16
	// that the server keeps, once a stream asks for bfloat16 features
	// (0: DefaultBF16TableBytes; negative: none, every batch rounds its
	// rows).
	BF16TableBytes int64

	// Secret, when set, must come with every request (SecretMetadata).
	Secret []byte
	// TLS, when set, is the server side of mutual TLS (auth.MutualTLS).
	TLS *tls.Config
	// Metrics receives the server's series (nil: NewMetrics()).
	Metrics *Metrics

	// RingDir, when set, enables SampleShm: each stream's shared-memory
	// ring is a file there (a directory on a memory file system, private
	// to the client: strata_pyg passes the child server its own).
	RingDir string
	// RingBytes bounds one ring (default DefaultRingBytes; a stream may
	// ask for less), and each ring takes at most half the free space of
	// RingDir's file system.
	RingBytes int64
	// ReleaseTimeout is how long a SampleShm stream waits for its client
	// to release a slot, unless the request says (default
	// DefaultReleaseTimeout).
	ReleaseTimeout time.Duration

	// Partition, when set, is the part of a partition this server owns
	// (Info reports it; SampleRequest.owned streams sample only its seeds).
	Partition *Partition

	// Shard, when set, is the part of the feature table this server
	// holds (a machine's rows, shard.go): Features serves those rows
	// instead of Dataset.Features and refuses any other by ID.
	Shard *Shard

	// Hetero, when set, is a typed dataset: requests with input_type
	// sample it (typed batches). Dataset is then its graph with the types
	// erased (nil: Hetero.ToHomogeneous()), which Info describes and the
	// other requests sample.
	Hetero *dataset.Hetero

	// Relay, when set, makes the server a relay (relay.go): it holds no
	// dataset, serves SampleShm by streaming each epoch from these
	// upstream servers, and Info is the first upstream's.
	Relay *Relay
}

// Server is a sampling and feature server. Create it with New, run it
// with Serve, stop it with Drain or Stop.
type Server struct {
	servepb.UnimplementedSamplerServer
	opt     Options
	ds      *dataset.Dataset
	in      *graph.CSR
	n       int64
	grpc    *grpc.Server
	health  *health.Server
	metrics *Metrics

	mu       sync.Mutex
	samplers map[string]*samplerSet
	order    []string // configurations in creation order
	closed   bool

	relabelers sync.Pool
	het        *heteroServed // typed datasets only
	// hetRelabelers holds []*Relabeler, one per node type.
	hetRelabelers sync.Pool
	streams       atomic.Int64
	stats         statCounters
	active        sync.Map // *stream -> struct{}: the streams running now
	bf16          bf16Table
}

// samplerSet is the samplers of one configuration, one per device.
type samplerSet struct {
	s   []sample.Sampler
	hop []sample.HopSampler // nil entries: not hop samplers
	het *sample.HeteroSampler
}

type statCounters struct {
	produced, sent, queued atomic.Int64
}

// Stats are counters of a server's Sample streams, for tests and logs.
type Stats struct {
	Produced int64 // batches sampled and encoded
	Sent     int64 // batches handed to gRPC
	Queued   int64 // sampled, waiting to be sent
	Blocked  int64 // streams waiting for their client to read
	Streams  int64 // open Sample streams
}

// Stats returns the current counters.
func (s *Server) Stats() Stats {
	return Stats{Produced: s.stats.produced.Load(), Sent: s.stats.sent.Load(), Queued: s.stats.queued.Load(),
		Blocked: s.blocked(), Streams: s.streams.Load()}
}

// blocked counts the streams whose sender waits in gRPC's Send while
// every slot of their queue is taken, or that wait for their client to
// release a ring slot: sampling waits for the client.
func (s *Server) blocked() int64 {
	var n int64
	s.active.Range(func(k, _ any) bool {
		st := k.(*stream)
		if (st.inSend.Load() && len(st.slots) == cap(st.slots)) || (st.shm != nil && st.shm.waiting.Load() > 0) {
			n++
		}
		return true
	})
	return n
}

// New checks opt and builds the server (not yet listening).
func New(opt Options) (*Server, error) {
	var het *heteroServed
	if opt.Hetero != nil {
		var err error
		if het, err = newHeteroServed(opt.Hetero); err != nil {
			return nil, err
		}
		if opt.Dataset == nil {
			if opt.Dataset, err = opt.Hetero.ToHomogeneous(); err != nil {
				return nil, fmt.Errorf("serve: %w", err)
			}
		}
	}
	if opt.Relay != nil {
		if err := opt.Relay.check(opt); err != nil {
			return nil, err
		}
		opt.Dataset, opt.In, opt.Hetero, opt.Partition, opt.Shard = nil, nil, nil, nil, nil
	} else if opt.Dataset == nil || opt.Dataset.Graph == nil {
		return nil, errors.New("serve: no dataset")
	}
	ds := opt.Dataset
	in := opt.In
	if in == nil && ds != nil {
		var err error
		if in, err = ds.InAdjacency(); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	if ds != nil && (in.NumRows != ds.NumNodes() || in.NumCols != in.NumRows) {
		return nil, fmt.Errorf("serve: in-adjacency is %d x %d for %d nodes", in.NumRows, in.NumCols, ds.NumNodes())
	}
	def := func(p *int, d int, name string) error {
		if *p < 0 {
			return fmt.Errorf("serve: %s %d < 0", name, *p)
		}
		if *p == 0 {
			*p = d
		}
		return nil
	}
	for _, c := range []struct {
		p    *int
		d    int
		name string
	}{
		{&opt.MaxSendBytes, DefaultMaxSendBytes, "MaxSendBytes"}, {&opt.MaxRecvBytes, DefaultMaxRecvBytes, "MaxRecvBytes"},
		{&opt.Workers, 1, "Workers"}, {&opt.MaxWorkers, DefaultMaxWorkers, "MaxWorkers"},
		{&opt.Prefetch, DefaultPrefetch, "Prefetch"}, {&opt.MaxPrefetch, DefaultMaxPrefetch, "MaxPrefetch"},
		{&opt.MaxStreams, DefaultMaxStreams, "MaxStreams"}, {&opt.MaxSamplers, DefaultMaxSamplers, "MaxSamplers"},
	} {
		if err := def(c.p, c.d, c.name); err != nil {
			return nil, err
		}
	}
	if opt.MaxRecvBytes < 4096 || opt.MaxSendBytes < 4096 {
		return nil, fmt.Errorf("serve: message limits %d (send) and %d (receive) bytes: at least 4096", opt.MaxSendBytes, opt.MaxRecvBytes)
	}
	if opt.Workers > opt.MaxWorkers || opt.Prefetch > opt.MaxPrefetch {
		return nil, fmt.Errorf("serve: default workers %d and prefetch %d exceed their maxima %d and %d", opt.Workers, opt.Prefetch, opt.MaxWorkers, opt.MaxPrefetch)
	}
	if opt.BF16TableBytes == 0 {
		opt.BF16TableBytes = DefaultBF16TableBytes
	}
	if opt.WindowBytes == 0 {
		opt.WindowBytes = DefaultWindowBytes
	}
	if opt.WindowBytes < 64<<10 {
		return nil, fmt.Errorf("serve: window %d bytes: at least 64 KiB", opt.WindowBytes)
	}
	if opt.Device == "" {
		opt.Device = "cpu"
	}
	if opt.RingBytes < 0 || opt.ReleaseTimeout < 0 {
		return nil, fmt.Errorf("serve: RingBytes %d and ReleaseTimeout %v: want >= 0", opt.RingBytes, opt.ReleaseTimeout)
	}
	if opt.RingBytes == 0 {
		opt.RingBytes = DefaultRingBytes
	}
	if opt.ReleaseTimeout == 0 {
		opt.ReleaseTimeout = DefaultReleaseTimeout
	}
	if opt.RingDir != "" {
		if !shmring.Supported {
			return nil, fmt.Errorf("serve: RingDir %s: %w", opt.RingDir, errors.ErrUnsupported)
		}
		if fi, err := os.Stat(opt.RingDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("serve: ring directory %s: not a directory (%v)", opt.RingDir, err)
		}
	}
	if p := opt.Partition; p != nil {
		if err := p.check(ds); err != nil {
			return nil, err
		}
	}
	if sh := opt.Shard; sh != nil {
		if err := sh.check(ds.NumNodes()); err != nil {
			return nil, err
		}
	}
	if opt.Metrics == nil {
		opt.Metrics = NewMetrics()
	}
	var n int64
	if ds != nil {
		n = ds.NumNodes()
	}
	s := &Server{opt: opt, ds: ds, in: in, n: n, metrics: opt.Metrics, samplers: map[string]*samplerSet{}, het: het}
	s.relabelers.New = func() any { return NewRelabeler(s.n) }
	if het != nil {
		s.hetRelabelers.New = func() any { return newHeteroRelabelers(het.n) }
	}
	s.metrics.watch(s)
	sopts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()), // sends the hand-encoded batches (wireMsg)
		grpc.MaxRecvMsgSize(opt.MaxRecvBytes),
		grpc.MaxSendMsgSize(opt.MaxSendBytes),
		grpc.InitialWindowSize(opt.WindowBytes),
		grpc.InitialConnWindowSize(opt.WindowBytes),
		grpc.WriteBufferSize(DefaultIOBufferBytes),
		// Dead peers (a client killed without closing its connection) are
		// found by pings; a client may ping every 10 s.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := s.authorize(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
	if opt.TLS != nil {
		cfg := opt.TLS.Clone()
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s.grpc = grpc.NewServer(sopts...)
	servepb.RegisterSamplerServer(s.grpc, s)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(servepb.Sampler_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s, nil
}

// authorize checks the shared secret of a request (the health service
// needs none: it tells nothing about the data).
func (s *Server) authorize(ctx context.Context, method string) error {
	if len(s.opt.Secret) == 0 || strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(SecretMetadata)
	if len(got) == 1 && secretEqual([]byte(got[0]), s.opt.Secret) {
		return nil
	}
	s.metrics.failed(method, codes.Unauthenticated)
	return status.Error(codes.Unauthenticated, "serve: missing or wrong shared secret (the "+SecretMetadata+" metadata must equal the server's secret)")
}

// secretEqual compares in time independent of where the inputs differ
// and of their lengths.
func secretEqual(a, b []byte) bool {
	ha, hb := sha256.Sum256(a), sha256.Sum256(b)
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// Serve accepts connections on ln until Stop or Drain; it returns nil
// after those.
func (s *Server) Serve(ln net.Listener) error {
	err := s.grpc.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Drain stops the server gracefully: the health service reports
// NOT_SERVING, no new connections or requests are accepted, and running
// requests may finish for up to timeout; then the rest are cut (clients
// see UNAVAILABLE) and the samplers are closed. It reports whether every
// request finished in time.
func (s *Server) Drain(timeout time.Duration) bool {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	clean := true
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		clean = false
		s.grpc.Stop()
		<-done
	}
	s.closeSamplers()
	return clean
}

// Stop cuts every connection and request at once and closes the samplers.
func (s *Server) Stop() {
	s.health.Shutdown()
	s.grpc.Stop()
	s.closeSamplers()
}

func (s *Server) closeSamplers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, k := range s.order {
		for _, sm := range s.samplers[k].s {
			if c, ok := sm.(io.Closer); ok {
				c.Close()
			}
		}
	}
	s.samplers = nil
}

// samplersFor returns (making them the first time) the samplers of one
// configuration. At most MaxSamplers configurations are kept: the oldest
// is dropped (not closed: streams may still use it) when a new one comes,
// except that samplers that must be closed are never dropped, and a new
// configuration is then refused.
func (s *Server) samplersFor(fanouts []int, replace bool) (*samplerSet, error) {
	key := fmt.Sprint(fanouts, replace)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "serve: the server is stopping")
	}
	if set, ok := s.samplers[key]; ok {
		return set, nil
	}
	if len(s.order) >= s.opt.MaxSamplers {
		old := s.samplers[s.order[0]]
		for _, sm := range old.s {
			if _, ok := sm.(io.Closer); ok {
				return nil, reqErr(ErrTooLarge, "fanouts", -1, "the server keeps samplers for %d configurations of fanouts and replace, all in use (--max-samplers)", s.opt.MaxSamplers)
			}
		}
		delete(s.samplers, s.order[0])
		s.order = s.order[1:]
	}
	var list []sample.Sampler
	if s.opt.NewSamplers == nil {
		ns, err := sample.NewNeighborSampler(s.in, sample.Config{Fanouts: fanouts, Replace: replace})
		if err != nil {
			return nil, reqErr(ErrInvalid, "fanouts", -1, "%v", err)
		}
		list = []sample.Sampler{ns}
	} else {
		var err error
		if list, err = s.opt.NewSamplers(slices.Clone(fanouts), replace); err != nil {
			return nil, err
		}
		if len(list) == 0 {
			return nil, errors.New("serve: NewSamplers returned no sampler")
		}
	}
	set := &samplerSet{s: list, hop: make([]sample.HopSampler, len(list))}
	for i, sm := range list {
		if h, ok := sm.(sample.HopSampler); ok && h.NumHops() == len(fanouts) && h.NumNodes() == s.n {
			set.hop[i] = h
		}
	}
	s.samplers[key] = set
	s.order = append(s.order, key)
	return set, nil
}

// heteroSamplerFor returns (making it the first time) the typed sampler
// of one configuration, kept and dropped as samplersFor's are.
func (s *Server) heteroSamplerFor(fanouts [][]int, replace bool) (*samplerSet, error) {
	key := fmt.Sprint("typed", fanouts, replace)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "serve: the server is stopping")
	}
	if set, ok := s.samplers[key]; ok {
		return set, nil
	}
	if len(s.order) >= s.opt.MaxSamplers {
		old := s.samplers[s.order[0]]
		for _, sm := range old.s {
			if _, ok := sm.(io.Closer); ok {
				return nil, reqErr(ErrTooLarge, "fanouts", -1, "the server keeps samplers for %d configurations of fanouts and replace, all in use (--max-samplers)", s.opt.MaxSamplers)
			}
		}
		delete(s.samplers, s.order[0])
		s.order = s.order[1:]
	}
	h, err := sample.NewHeteroSampler(s.het.n, s.het.rels, sample.HeteroConfig{Fanouts: fanouts, Replace: replace})
	if err != nil {
		return nil, reqErr(ErrInvalid, "relation_fanouts", -1, "%v", err)
	}
	set := &samplerSet{het: h}
	s.samplers[key] = set
	s.order = append(s.order, key)
	return set, nil
}

// Info describes the dataset and the server's limits.
func (s *Server) Info(ctx context.Context, req *servepb.InfoRequest) (*servepb.InfoReply, error) {
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		s.metrics.failed("Info", codes.FailedPrecondition)
		return nil, grpcError(err)
	}
	if s.opt.Relay != nil {
		return s.relayInfo(ctx)
	}
	ds := s.ds
	dim := featDim(ds)
	if s.opt.Shard != nil {
		dim = s.opt.Shard.Dim
	}
	var nts []*servepb.NodeTypeInfo
	var ets []*servepb.EdgeTypeInfo
	if s.het != nil {
		nts, ets = s.het.info()
	}
	caps := []string{CapLink, CapBFloat16}
	if s.het != nil {
		caps = append(caps, CapTyped)
	}
	return &servepb.InfoReply{NodeTypes: nts, EdgeTypes: ets, Capabilities: caps,
		ProtocolVersion: ProtocolVersion, ServerVersion: Version, Dataset: ds.Name,
		NumNodes: s.n, NumEdges: s.in.NumEdges(), FeatDim: int64(dim), NumClasses: int64(numClasses(ds)),
		NumTrain: int64(len(ds.Train)), NumVal: int64(len(ds.Val)), NumTest: int64(len(ds.Test)),
		Directed: ds.Directed, MaxSendBytes: int64(s.opt.MaxSendBytes), MaxRecvBytes: int64(s.opt.MaxRecvBytes),
		Device: s.opt.Device, Shm: s.opt.RingDir != "", Partition: s.opt.Partition.info(ds),
	}, nil
}

// Version is the server version Info reports (cmd/strata sets Strata's).
var Version = "dev"

func featDim(ds *dataset.Dataset) int {
	if ds.Features == nil {
		return 0
	}
	return ds.FeatDim
}

func numClasses(ds *dataset.Dataset) int {
	if ds.Labels == nil {
		return 0
	}
	return ds.NumClasses
}

func checkVersion(v uint32) error {
	if v != ProtocolVersion {
		return reqErr(ErrVersion, "protocol_version", -1, "the client speaks protocol %d, this server %d (update the client or the server so that they match)", v, ProtocolVersion)
	}
	return nil
}

// Features returns rows of the features and labels.
func (s *Server) Features(ctx context.Context, req *servepb.FeaturesRequest) (*servepb.FeaturesReply, error) {
	rep, err := s.features(req)
	if err != nil {
		err = grpcError(err)
		s.metrics.failed("Features", status.Code(err))
		return nil, err
	}
	s.metrics.bytes.WithLabelValues("Features").Add(float64(proto.Size(rep)))
	return rep, nil
}

func (s *Server) features(req *servepb.FeaturesRequest) (*servepb.FeaturesReply, error) {
	if s.opt.Relay != nil {
		return nil, errRelayOnly
	}
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return nil, err
	}
	if !req.Features && !req.Labels {
		return nil, reqErr(ErrInvalid, "features", -1, "asks for neither features nor labels")
	}
	if req.Features && s.opt.Shard != nil {
		return s.shardFeatures(req)
	}
	if req.Features && s.ds.Features == nil {
		return nil, reqErr(ErrUnavailable, "features", -1, "the dataset %q has no node features", s.ds.Name)
	}
	if req.Labels && s.ds.Labels == nil {
		return nil, reqErr(ErrUnavailable, "labels", -1, "the dataset %q has no labels", s.ds.Name)
	}
	row := 0
	if req.Features {
		row += 4 * featDim(s.ds)
	}
	if req.Labels {
		row += 4
	}
	// The reply must fit: bound the rows before reading the IDs.
	maxRows := (s.opt.MaxSendBytes - 256) / row
	ids, err := DecodeIDs(req.Ids, "ids", s.n, maxRows)
	if err != nil {
		return nil, err
	}
	rep := &servepb.FeaturesReply{}
	if req.Features {
		rep.X = gatherRows(s.ds.Features, s.ds.FeatDim, ids)
	}
	if req.Labels {
		rep.Y = gatherLabels(s.ds.Labels, ids)
	}
	s.metrics.featureRows.Add(float64(len(ids)))
	return rep, nil
}

// seedsOf returns the request's seed set.
func (s *Server) seedsOf(req *servepb.SampleRequest) ([]graph.NodeID, error) {
	if req.Seeds != nil {
		if req.Split != servepb.Split_SPLIT_UNSPECIFIED {
			return nil, reqErr(ErrInvalid, "split", -1, "%s given with seeds: give one of them", req.Split)
		}
		ids, err := DecodeIDs(req.Seeds, "seeds", s.n, int(min(s.n, math.MaxInt32)))
		if err != nil {
			return nil, err
		}
		// Seeds must be distinct (PyG's batches, and ours, need it).
		seen := make([]uint64, (s.n+63)/64)
		for i, v := range ids {
			if seen[v/64]&(1<<(v%64)) != 0 {
				return nil, reqErr(ErrInvalid, "seeds", i, "node %d appears twice (seeds must be distinct)", v)
			}
			seen[v/64] |= 1 << (v % 64)
		}
		return ids, nil
	}
	var ids []int32
	switch req.Split {
	case servepb.Split_SPLIT_TRAIN:
		ids = s.ds.Train
	case servepb.Split_SPLIT_VAL:
		ids = s.ds.Val
	case servepb.Split_SPLIT_TEST:
		ids = s.ds.Test
	case servepb.Split_SPLIT_ALL:
		all := make([]graph.NodeID, s.n)
		for i := range all {
			all[i] = graph.NodeID(i)
		}
		return all, nil
	case servepb.Split_SPLIT_UNSPECIFIED:
		return nil, reqErr(ErrInvalid, "seeds", -1, "neither seeds nor a split given")
	default:
		return nil, reqErr(ErrInvalid, "split", -1, "unknown split %d", int32(req.Split))
	}
	if ids == nil {
		return nil, reqErr(ErrUnavailable, "split", -1, "the dataset %q has no %s split", s.ds.Name, req.Split)
	}
	return ids, nil
}

// stream is one Sample or SampleShm request being served.
type stream struct {
	s        *Server
	req      *servepb.SampleRequest
	set      *samplerSet
	seeds    []graph.NodeID
	posOf    []int32 // owned streams: the position of seeds[k] in the request's full seed set
	order    []int32 // positions in seeds, this rank's epoch
	epoch    Epoch
	jobs     []int // batch indices this part serves
	nb       int   // batches in the rank's epoch
	withX    bool
	withY    bool
	workers  int
	prefetch int
	slots    chan struct{} // one per batch sampled ahead of gRPC
	inSend   atomic.Bool   // the sender is in gRPC's Send
	shm      *shmStream    // SampleShm: the ring
	link     *linkStream   // link requests: the edges (seeds is nil)
	typed    int           // typed requests: the input type; -1 otherwise
	bf16     bool          // x as bfloat16 in messages (feature_dtype)
}

// check validates a SampleRequest and prepares its stream.
func (s *Server) prepare(req *servepb.SampleRequest) (*stream, error) {
	if err := checkVersion(req.GetProtocolVersion()); err != nil {
		return nil, err
	}
	if req.BatchSize == 0 || req.BatchSize > MaxBatchSize {
		return nil, reqErr(ErrInvalid, "batch_size", -1, "%d: want 1..%d", req.BatchSize, MaxBatchSize)
	}
	if (len(req.Fanouts) == 0 && req.InputType == "") || len(req.Fanouts) > MaxHops {
		return nil, reqErr(ErrInvalid, "fanouts", -1, "%d hops: want 1..%d", len(req.Fanouts), MaxHops)
	}
	fanouts := make([]int, len(req.Fanouts))
	for i, f := range req.Fanouts {
		if f != -1 && (f <= 0 || f > MaxFanout) {
			return nil, reqErr(ErrInvalid, "fanouts", i, "%d: want -1 (all neighbors) or 1..%d", f, MaxFanout)
		}
		fanouts[i] = int(f)
	}
	world, parts := max(int(req.WorldSize), 1), max(int(req.NumParts), 1)
	if world > MaxWorld || int(req.Rank) >= world {
		return nil, reqErr(ErrInvalid, "rank", -1, "rank %d of world_size %d: want rank < world_size <= %d", req.Rank, world, MaxWorld)
	}
	if parts > MaxWorld || int(req.Part) >= parts {
		return nil, reqErr(ErrInvalid, "part", -1, "part %d of num_parts %d: want part < num_parts <= %d", req.Part, parts, MaxWorld)
	}
	if req.Owned {
		if s.opt.Partition == nil {
			return nil, reqErr(ErrUnavailable, "owned", -1, "this server owns no part of a partition (strata serve --part): route round-robin")
		}
		if parts > 1 {
			return nil, reqErr(ErrInvalid, "part", -1, "owned streams split the seeds by partition: leave part and num_parts unset")
		}
	}
	if req.Epoch > math.MaxInt32 {
		return nil, reqErr(ErrInvalid, "epoch", -1, "%d: at most 2^31-1", req.Epoch)
	}
	workers, prefetch := int(req.Workers), int(req.Prefetch)
	if workers == 0 {
		workers = s.opt.Workers
	}
	if prefetch == 0 {
		prefetch = s.opt.Prefetch
	}
	if workers > s.opt.MaxWorkers {
		return nil, reqErr(ErrInvalid, "workers", -1, "%d: this server allows at most %d", workers, s.opt.MaxWorkers)
	}
	if prefetch > s.opt.MaxPrefetch {
		return nil, reqErr(ErrInvalid, "prefetch", -1, "%d: this server allows at most %d", prefetch, s.opt.MaxPrefetch)
	}
	if req.WithFeatures && s.ds.Features == nil {
		return nil, reqErr(ErrUnavailable, "with_features", -1, "the dataset %q has no node features", s.ds.Name)
	}
	if req.WithLabels && s.ds.Labels == nil {
		return nil, reqErr(ErrUnavailable, "with_labels", -1, "the dataset %q has no labels", s.ds.Name)
	}
	switch req.FeatureDtype {
	case servepb.DType_DTYPE_UNSPECIFIED, servepb.DType_DTYPE_FLOAT32:
	case servepb.DType_DTYPE_BFLOAT16:
		if req.InputType != "" {
			return nil, reqErr(ErrInvalid, "feature_dtype", -1, "BFLOAT16 is for node and link batches, not typed ones")
		}
	default:
		return nil, reqErr(ErrInvalid, "feature_dtype", -1, "%v: want FLOAT32 or BFLOAT16", req.FeatureDtype)
	}
	var seeds []graph.NodeID
	var ls *linkStream
	var err error
	typed, typedFan := -1, [][]int(nil)
	n := 0
	switch {
	case req.Link != nil:
		if ls, err = s.prepareLink(req); err != nil {
			return nil, err
		}
		n = len(ls.src)
	case req.InputType != "":
		if s.het == nil {
			return nil, reqErr(ErrUnavailable, "input_type", -1, "the dataset %q is not typed (no node types to sample from)", s.ds.Name)
		}
		if req.Owned {
			return nil, reqErr(ErrInvalid, "owned", -1, "typed batches cannot be routed by partition: route round-robin")
		}
		if typed, typedFan, err = s.het.typedRequest(req); err != nil {
			return nil, err
		}
		if req.WithFeatures && !slices.ContainsFunc(s.het.h.NodeTypes, func(nt dataset.NodeType) bool { return nt.FeatDim > 0 }) {
			return nil, reqErr(ErrUnavailable, "with_features", -1, "the dataset %q has no node features", s.het.h.Name)
		}
		if seeds, err = s.het.seedsOf(req, typed); err != nil {
			return nil, err
		}
		n = len(seeds)
	default:
		if req.RelationFanouts != nil {
			return nil, reqErr(ErrInvalid, "relation_fanouts", -1, "only with input_type")
		}
		if seeds, err = s.seedsOf(req); err != nil {
			return nil, err
		}
		n = len(seeds)
	}
	var posOf []int32
	e := Epoch{BatchSize: int(req.BatchSize), Shuffle: req.Shuffle, Seed: req.Seed, Epoch: int(req.Epoch),
		DropLast: req.DropLast, Rank: int(req.Rank), World: world}
	if req.Owned {
		seeds, posOf = s.opt.Partition.owned(seeds)
		e.Part, e.Parts = s.opt.Partition.Part, s.opt.Partition.Book.K()
	}
	if req.Owned {
		n = len(seeds)
	}
	order, err := Plan(n, e)
	if err != nil {
		return nil, err
	}
	nb := NumBatches(n, e.BatchSize, world, e.DropLast)
	st := &stream{s: s, req: req, seeds: seeds, posOf: posOf, order: order, epoch: e, nb: nb, withX: req.WithFeatures, withY: req.WithLabels,
		workers: workers, prefetch: max(prefetch, workers), link: ls, typed: typed,
		bf16: req.FeatureDtype == servepb.DType_DTYPE_BFLOAT16}
	for i := int(req.Part); i < nb; i += parts {
		st.jobs = append(st.jobs, i)
	}
	if typed >= 0 {
		st.set, err = s.heteroSamplerFor(typedFan, req.Replace)
	} else {
		st.set, err = s.samplersFor(fanouts, req.Replace)
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Sample streams the batches of one epoch (see SampleRequest).
func (s *Server) Sample(req *servepb.SampleRequest, ss servepb.Sampler_SampleServer) error {
	err := s.sample(req, ss)
	if err != nil {
		err = grpcError(err)
		s.metrics.failed("Sample", status.Code(err))
	}
	return err
}

// openStream counts a new stream against MaxStreams; done uncounts it.
func (s *Server) openStream() (done func(), err error) {
	if n := s.streams.Add(1); n > int64(s.opt.MaxStreams) {
		s.streams.Add(-1)
		return nil, status.Errorf(codes.ResourceExhausted, "serve: %d Sample streams are open, the most this server allows (--max-streams)", s.opt.MaxStreams)
	}
	s.metrics.streams.Inc()
	return func() {
		s.streams.Add(-1)
		s.metrics.streams.Dec()
	}, nil
}

func (s *Server) sample(req *servepb.SampleRequest, ss servepb.Sampler_SampleServer) error {
	if s.opt.Relay != nil {
		return errRelayOnly
	}
	done, err := s.openStream()
	if err != nil {
		return err
	}
	defer done()
	st, err := s.prepare(req)
	if err != nil {
		return err
	}
	// The messages are encoded by hand (wireMsg): send them through the
	// stream's generic SendMsg, which the server's codec understands.
	return st.run(ss.Context(), ss.SendMsg)
}

type result struct {
	msg  *wireMsg
	size int
	err  error
	wait time.Duration // spent waiting for the client (a ring slot)
}

// run samples the stream's batches with st.workers goroutines and sends
// them in order. A worker takes a slot before taking the next batch and
// the sender frees it once gRPC has taken the batch, so at most
// st.prefetch batches are sampled ahead of the client; slots are taken
// in batch order, so the batch the sender waits for always has one.
// (SampleShm streams are further bounded by their ring: shm.go.)
func (st *stream) run(ctx context.Context, send func(any) error) error {
	s := st.s
	if len(st.jobs) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	P := st.prefetch
	ring := make([]chan result, P)
	for i := range ring {
		ring[i] = make(chan result, 1)
	}
	slots := make(chan struct{}, P)
	st.slots = slots
	s.active.Store(st, struct{}{})
	defer s.active.Delete(st)
	if st.shm != nil {
		st.shm.start(ctx, cancel)
	}
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range min(st.workers, len(st.jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.relabelers.Get().(*Relabeler)
			defer s.relabelers.Put(r)
			for {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				mu.Lock()
				j := next
				next++
				mu.Unlock()
				if j >= len(st.jobs) {
					<-slots
					return
				}
				t0 := time.Now()
				res := st.produce(ctx, r, j)
				s.metrics.latency.Observe((time.Since(t0) - res.wait).Seconds())
				s.stats.produced.Add(1)
				s.stats.queued.Add(1)
				s.metrics.queue.Inc()
				ring[j%P] <- res // empty: batch j-P was sent before slot j was free
			}
		}()
	}
	defer func() {
		cancel(nil)
		wg.Wait()
		// Batches sampled but never sent leave the queue.
		for _, ch := range ring {
			select {
			case res := <-ch:
				res.msg.free()
				s.stats.queued.Add(-1)
				s.metrics.queue.Dec()
			default:
			}
		}
	}()
	for j := range st.jobs {
		var res result
		select {
		case res = <-ring[j%P]:
		case <-ctx.Done():
			return streamEnd(ctx)
		}
		s.stats.queued.Add(-1)
		s.metrics.queue.Dec()
		if res.err != nil {
			return res.err
		}
		if st.shm != nil {
			// Before Send: the client may release the batch as soon as it
			// has it.
			st.shm.sent.Add(1)
		}
		st.inSend.Store(true)
		err := send(res.msg)
		st.inSend.Store(false)
		if err != nil {
			res.msg.free()
			return err
		}
		<-slots
		s.stats.sent.Add(1)
		s.metrics.batches.Inc()
		s.metrics.bytes.WithLabelValues("Sample").Add(float64(res.size))
	}
	if st.shm != nil {
		return st.shm.finish(ctx, len(st.jobs))
	}
	return nil
}

// streamEnd is the error of a stream whose context ended: the cause
// given to cancel (a SampleShm protocol or release error), else the
// context's.
func streamEnd(ctx context.Context) error {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() {
		return c
	}
	return status.FromContextError(ctx.Err()).Err()
}

// produce samples the stream's j-th batch and encodes it for its
// transport.
func (st *stream) produce(ctx context.Context, r *Relabeler, j int) result {
	i := st.jobs[j]
	if st.typed >= 0 {
		return st.produceTyped(i)
	}
	t0 := time.Now()
	b, pos, err := st.sample(r, i)
	if err != nil {
		return result{err: err}
	}
	tm := batchTiming{sample: time.Since(t0)}
	if st.shm != nil {
		return st.shm.produce(ctx, st, j, b, pos, tm)
	}
	msg, size, err := st.encodeWire(b, i, pos, nil, "", st.s.opt.MaxSendBytes, tm)
	return result{msg: msg, size: size, err: err}
}

// sample draws batch i of the stream's epoch; pos are its seeds'
// positions in st.seeds.
func (st *stream) sample(r *Relabeler, i int) (*PyGBatch, []int32, error) {
	bs := st.epoch.BatchSize
	lo, hi := i*bs, min((i+1)*bs, len(st.order))
	pos := st.order[lo:hi]
	key := st.epoch.Key(i)
	d := i % len(st.set.s)
	nodes := func(seeds []graph.NodeID) (*PyGBatch, error) {
		if h := st.set.hop[d]; h != nil {
			return SampleFrontier(h, r, seeds, key)
		}
		mb, err := st.set.s[d].Sample(seeds, key)
		if err != nil {
			return nil, err
		}
		return FromMiniBatch(mb, r, st.s.n)
	}
	var b *PyGBatch
	var err error
	if ls := st.link; ls != nil {
		pe := link.Edges{Src: make([]graph.NodeID, len(pos)), Dst: make([]graph.NodeID, len(pos))}
		for k, p := range pos {
			pe.Src[k], pe.Dst[k] = ls.src[p], ls.dst[p]
		}
		b, err = LinkBatch(ls.neg, ls.amount, pe, key, nodes)
	} else {
		seeds := make([]graph.NodeID, len(pos))
		for k, p := range pos {
			seeds[k] = st.seeds[p]
		}
		b, err = nodes(seeds)
	}
	if err != nil {
		var se *sample.Error
		if errors.As(err, &se) && (errors.Is(err, sample.ErrNode) || errors.Is(err, sample.ErrDuplicate) || errors.Is(err, sample.ErrConfig)) {
			return nil, nil, reqErr(ErrInvalid, "seeds", -1, "batch %d: %v", i, err)
		}
		if errors.Is(err, sample.ErrTooLarge) {
			return nil, nil, reqErr(ErrTooLarge, "batch_size", -1, "batch %d: %v", i, err)
		}
		return nil, nil, fmt.Errorf("serve: batch %d: %w", i, err)
	}
	return b, pos, nil
}

// produceTyped samples and encodes typed batch i (always inline: a
// SampleShm stream refuses typed requests).
func (st *stream) produceTyped(i int) result {
	bs := st.epoch.BatchSize
	lo, hi := i*bs, min((i+1)*bs, len(st.order))
	pos := st.order[lo:hi]
	seeds := make([]graph.NodeID, len(pos))
	for k, p := range pos {
		seeds[k] = st.seeds[p]
	}
	rls := st.s.hetRelabelers.Get().([]*Relabeler)
	defer st.s.hetRelabelers.Put(rls)
	b, err := SampleHeteroFrontier(st.set.het, rls, st.typed, seeds, st.epoch.Key(i))
	if err != nil {
		var se *sample.Error
		if errors.As(err, &se) && (errors.Is(err, sample.ErrNode) || errors.Is(err, sample.ErrDuplicate)) {
			return result{err: reqErr(ErrInvalid, "seeds", -1, "batch %d: %v", i, err)}
		}
		return result{err: fmt.Errorf("serve: batch %d: %w", i, err)}
	}
	m := st.typedMessage(b, i, pos)
	size := proto.Size(m)
	if size > st.s.opt.MaxSendBytes {
		return result{size: size, err: reqErr(ErrTooLarge, "batch_size", -1, "batch %d is a %d-byte message, over this server's limit of %d (--max-message-mb): use a smaller batch_size or fanouts",
			i, size, st.s.opt.MaxSendBytes)}
	}
	return result{msg: &wireMsg{pb: m}, size: size}
}
