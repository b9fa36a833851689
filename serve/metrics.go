package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"
)

// Metrics are the Prometheus series of a server, in their own registry
// (Registry), so several servers in one process (tests) do not collide.
type Metrics struct {
	Registry    *prometheus.Registry
	batches     prometheus.Counter
	bytes       *prometheus.CounterVec
	errors      *prometheus.CounterVec
	latency     prometheus.Histogram
	queue       prometheus.Gauge
	streams     prometheus.Gauge
	featureRows prometheus.Counter
	ringBytes   prometheus.Counter
	ringInline  prometheus.Counter
}

// NewMetrics creates the series and registers them, with the Go and
// process collectors, in a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_serve_batches_total",
			Help: "Batches sent to clients."}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_serve_sent_bytes_total",
			Help: "Bytes of reply messages handed to gRPC, by method."}, []string{"method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_serve_errors_total",
			Help: "Requests that ended with an error, by method and gRPC code."}, []string{"method", "code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strata_serve_batch_seconds",
			Help:    "Time to sample one batch and build its message (features included).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_serve_queue_depth",
			Help: "Batches sampled and waiting to be sent, over all streams."}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_serve_streams",
			Help: "Sample streams open now."}),
		featureRows: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_serve_feature_rows_total",
			Help: "Rows returned by Features."}),
		ringBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_serve_ring_bytes_total",
			Help: "Bytes of batches written into shared-memory rings (SampleShm)."}),
		ringInline: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_serve_ring_inline_total",
			Help: "SampleShm batches sent inline: over the ring's slot size, or no ring could be made."}),
	}
	m.Registry.MustRegister(m.batches, m.bytes, m.errors, m.latency, m.queue, m.streams, m.featureRows, m.ringBytes, m.ringInline,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) failed(method string, code codes.Code) {
	m.errors.WithLabelValues(method, code.String()).Inc()
}

// watch adds the series read from s when scraped. A second server on
// the same Metrics keeps the first one's.
func (m *Metrics) watch(s *Server) {
	m.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_serve_blocked_streams",
		Help: "Streams whose queue is full while gRPC holds back their next batch, or waiting for their client to release a ring slot: sampling waits for the client."},
		func() float64 { return float64(s.blocked()) }))
}
