package telemetry

import (
	"time"
)

// Telemetry is the server's instruments and where they go.
type Telemetry struct {
	Metrics  *Metrics
	Exporter *Exporter // nil: no OTLP

	// Operations is mcp.server.operation.duration (MCP semantic
	// conventions): tool calls by method, tool, transport and error type.
	Operations *Histogram
	// Exec is the duration of exec calls.
	Exec *Histogram
	// Boots counts sandboxes booted, by how (created, started, adopted).
	Boots *Counter
	// Bytes counts the bytes moved by transfers, by direction (in: to a
	// sandbox, out: from one).
	Bytes *Counter
	// Egress counts the egress proxy's decisions (allowed, refused).
	Egress *Counter
}

// New returns the server's instruments, exported by exp (nil: only
// through WritePrometheus).
func New(m *Metrics, exp *Exporter) *Telemetry {
	t := &Telemetry{Metrics: m, Exporter: exp,
		Operations: m.Histogram("mcp.server.operation.duration", "MCP request duration as observed on the server, from receipt until the result is sent", "s", DurationBounds),
		Exec:       m.Histogram("sandbox_mcp.exec.duration", "Duration of exec tool calls", "s", DurationBounds),
		Boots:      m.Counter("sandbox_mcp.boots", "Sandboxes booted by this server, by how: created, started (stopped before) or adopted (running)", ""),
		Bytes:      m.Counter("sandbox_mcp.transfer.io", "Bytes moved by upload (in) and download (out)", "By"),
		Egress:     m.Counter("sandbox_mcp.egress.decisions", "Connections the egress proxy decided on, by decision", ""),
	}
	if exp != nil {
		m.CounterFunc("sandbox_mcp.telemetry.dropped_spans", "Spans dropped because the OTLP endpoint was slow or down", "", func() []Point {
			return []Point{{Value: float64(exp.Dropped())}}
		})
	}
	return t
}

// Tracing reports whether spans are recorded (an OTLP endpoint for
// traces is set).
func (t *Telemetry) Tracing() bool { return t != nil && t.Exporter.Tracing() }

// Close sends what is left, giving up after d.
func (t *Telemetry) Close(d time.Duration) {
	if t != nil {
		t.Exporter.Close(d)
	}
}
