package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve/servepb"
)

// ClientOptions configure Dial.
type ClientOptions struct {
	TLS          *tls.Config // mutual TLS (auth.MutualTLS); nil: plain
	Secret       []byte      // sent with every request when set
	MaxRecvBytes int         // largest reply accepted (default DefaultMaxSendBytes)
	MaxSendBytes int         // largest request sent (default DefaultMaxRecvBytes)
	Timeout      time.Duration
	// WindowBytes is the receive window of a stream and of the
	// connection (default DefaultWindowBytes; fixed, no growth).
	WindowBytes int32
	// BulkReceive is for streams of large messages (the relay's): the
	// socket is read DefaultIOBufferBytes at a time (gRPC's 32 KiB cost
	// a system call every two frames), and frames are received into
	// pooled buffers that are not cleared first (gRPC's pool clears each
	// 16 KiB buffer it hands out: a sixth of the relay's receive; every
	// byte of such a buffer is overwritten by the frame read into it).
	BulkReceive bool
}

// Client is a connection to a `strata serve`; its errors name the server.
type Client struct {
	Addr    string
	conn    *grpc.ClientConn
	c       servepb.SamplerClient
	secret  string
	timeout time.Duration
}

// Dial connects to a server at addr ("HOST:PORT" or "unix:PATH"); the
// connection is made lazily, by the first request.
func Dial(addr string, opt ClientOptions) (*Client, error) {
	if opt.MaxRecvBytes == 0 {
		opt.MaxRecvBytes = DefaultMaxSendBytes
	}
	if opt.MaxSendBytes == 0 {
		opt.MaxSendBytes = DefaultMaxRecvBytes
	}
	if opt.WindowBytes == 0 {
		opt.WindowBytes = DefaultWindowBytes
	}
	if opt.Timeout == 0 {
		opt.Timeout = 30 * time.Second
	}
	creds := insecure.NewCredentials()
	if opt.TLS != nil {
		creds = credentials.NewTLS(opt.TLS)
	}
	target := addr
	if p, ok := UnixPath(addr); ok {
		target = "unix://" + p
	} else {
		target = "passthrough:///" + addr
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opt.MaxRecvBytes), grpc.MaxCallSendMsgSize(opt.MaxSendBytes)),
		grpc.WithInitialWindowSize(opt.WindowBytes), grpc.WithInitialConnWindowSize(opt.WindowBytes)}
	if opt.BulkReceive {
		dopts = append(dopts, experimental.WithBufferPool(unclearedPool), grpc.WithReadBufferSize(DefaultIOBufferBytes))
	}
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, fmt.Errorf("serve: server %s: %w", addr, err)
	}
	return &Client{Addr: addr, conn: conn, c: servepb.NewSamplerClient(conn), secret: string(opt.Secret), timeout: opt.Timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) ctx(parent context.Context) context.Context {
	if c.secret != "" {
		parent = metadata.AppendToOutgoingContext(parent, SecretMetadata, c.secret)
	}
	return parent
}

func (c *Client) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("serve: server %s: %w", c.Addr, err)
}

// Info asks for the server's description, within the client's timeout.
func (c *Client) Info(ctx context.Context) (*servepb.InfoReply, error) {
	ctx, cancel := context.WithTimeout(c.ctx(ctx), c.timeout)
	defer cancel()
	r, err := c.c.Info(ctx, &servepb.InfoRequest{ProtocolVersion: ProtocolVersion})
	return r, c.wrap(err)
}

// Features looks up feature rows and/or labels of ids.
func (c *Client) Features(ctx context.Context, ids []graph.NodeID, x, y bool) (*servepb.FeaturesReply, error) {
	ctx, cancel := context.WithTimeout(c.ctx(ctx), c.timeout)
	defer cancel()
	r, err := c.c.Features(ctx, &servepb.FeaturesRequest{ProtocolVersion: ProtocolVersion,
		Ids: Int32Tensor(ids, int64(len(ids))), Features: x, Labels: y})
	return r, c.wrap(err)
}

// Sample opens a stream of batches; req.ProtocolVersion is filled in.
// Each Recv waits at most the client's timeout (an idle-stream deadline:
// the stream is cancelled and Recv fails naming the server). opts are
// gRPC's call options (the relay's codec).
func (c *Client) Sample(ctx context.Context, req *servepb.SampleRequest, opts ...grpc.CallOption) (*BatchStream, error) {
	ctx, cancel := context.WithCancel(c.ctx(ctx))
	req.ProtocolVersion = ProtocolVersion
	s, err := c.c.Sample(ctx, req, opts...)
	if err != nil {
		cancel()
		return nil, c.wrap(err)
	}
	return &BatchStream{c: c, s: s, cancel: cancel}, nil
}

// BatchStream is an open Sample stream.
type BatchStream struct {
	c      *Client
	s      grpc.ServerStreamingClient[servepb.Batch]
	cancel context.CancelFunc
}

// ErrIdle is wrapped by Recv's error when no batch came within the
// client's timeout.
var ErrIdle = errors.New("no batch within the timeout")

// Recv returns the next batch, io.EOF after the last.
func (b *BatchStream) Recv() (*servepb.Batch, error) {
	t := time.AfterFunc(b.c.timeout, b.cancel)
	m, err := b.s.Recv()
	if !t.Stop() && err != nil {
		return nil, b.c.wrap(fmt.Errorf("%w (%v): %v", ErrIdle, b.c.timeout, err))
	}
	if err == io.EOF {
		b.cancel()
		return nil, io.EOF
	}
	return m, b.c.wrap(err)
}

// Close cancels the stream.
func (b *BatchStream) Close() { b.cancel() }

// unclearedPool is mem.DefaultBufferPool's tiers (256 B to 1 MiB)
// without the clearing; larger buffers are not pooled.
var unclearedPool mem.BufferPool = newTieredPool(256, 4<<10, 16<<10, 32<<10, 1<<20)

type tieredPool struct {
	sizes []int
	tiers []sync.Pool
}

func newTieredPool(sizes ...int) *tieredPool {
	return &tieredPool{sizes: sizes, tiers: make([]sync.Pool, len(sizes))}
}

func (p *tieredPool) Get(n int) *[]byte {
	i, _ := slices.BinarySearch(p.sizes, n)
	if i == len(p.sizes) {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, p.sizes[i])
	return &b
}

func (p *tieredPool) Put(b *[]byte) {
	// A buffer goes back to the largest tier it holds.
	i, ok := slices.BinarySearch(p.sizes, cap(*b))
	if !ok {
		i--
	}
	if i >= 0 {
		p.tiers[i].Put(b)
	}
}
