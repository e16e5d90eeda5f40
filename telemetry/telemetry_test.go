package telemetry

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPrometheusText(t *testing.T) {
	m := NewMetrics()
	tel := New(m, nil)
	tel.Operations.Record(0.0007, Attr{"gen_ai.tool.name", "exec"})
	tel.Operations.Record(0.5, Attr{"gen_ai.tool.name", "exec"})
	tel.Operations.Record(3, Attr{"gen_ai.tool.name", "exec"}, Attr{"error.type", "tool_error"})
	tel.Boots.Add(1, Attr{"how", "created"})
	tel.Boots.Add(2, Attr{"how", "created"})
	tel.Bytes.Add(1234, Attr{"direction", "in"})
	m.Gauge("sandbox_mcp.sandboxes", "by state", "", func() []Point {
		return []Point{{Attrs: []Attr{{"state", "running"}}, Value: 2}}
	})
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# TYPE mcp_server_operation_duration_seconds histogram",
		`mcp_server_operation_duration_seconds_bucket{gen_ai_tool_name="exec",le="0.0005"} 0`,
		`mcp_server_operation_duration_seconds_bucket{gen_ai_tool_name="exec",le="0.001"} 1`,
		`mcp_server_operation_duration_seconds_bucket{gen_ai_tool_name="exec",le="0.5"} 2`,
		`mcp_server_operation_duration_seconds_bucket{gen_ai_tool_name="exec",le="+Inf"} 2`,
		`mcp_server_operation_duration_seconds_count{gen_ai_tool_name="exec"} 2`,
		`mcp_server_operation_duration_seconds_count{gen_ai_tool_name="exec",error_type="tool_error"} 1`,
		`sandbox_mcp_boots_total{how="created"} 3`,
		`sandbox_mcp_transfer_io_bytes_total{direction="in"} 1234`,
		`sandbox_mcp_sandboxes{state="running"} 2`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestSeriesAreBounded(t *testing.T) {
	m := NewMetrics()
	c := m.Counter("c", "", "")
	for i := range maxSeries + 500 {
		c.Add(1, Attr{"k", strings.Repeat("x", i%7) + string(rune('a'+i%26)) + hex.EncodeToString([]byte{byte(i), byte(i >> 8)})})
	}
	if n := c.in.n.Load(); n > maxSeries+1 {
		t.Fatalf("%d series kept", n)
	}
	var b strings.Builder
	m.WritePrometheus(&b)
	if !strings.Contains(b.String(), `c_total{otel_metric_overflow="true"} 500`) {
		t.Fatalf("the overflow is not counted:\n%.300s", b.String()[len(b.String())-300:])
	}
}

// collector is an OTLP/HTTP receiver that keeps the bodies it gets.
type collector struct {
	mu      sync.Mutex
	traces  []map[string]any
	metrics []map[string]any
	headers []http.Header
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &body); err != nil || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "bad body", 400)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.headers = append(c.headers, r.Header.Clone())
	switch r.URL.Path {
	case "/v1/traces":
		c.traces = append(c.traces, body)
	case "/v1/metrics":
		c.metrics = append(c.metrics, body)
	default:
		http.NotFound(w, r)
	}
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestExportOverOTLP(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	m := NewMetrics()
	exp, err := ExporterFromEnv(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL + "/",
		"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s%20ecret, other = ab+cd/ef=="}), m, "sandbox-mcp", "v1", nil)
	if err != nil || exp == nil {
		t.Fatalf("exporter: %v %v", exp, err)
	}
	tel := New(m, exp)
	tel.Exec.Record(0.002)
	trace, parent, span := NewIDs("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	exp.Offer(Span{TraceID: trace, ParentID: parent, SpanID: span, Name: "tools/call exec", Start: time.Now(), End: time.Now(),
		Attrs: []Attr{{"gen_ai.tool.name", "exec"}, {"sandbox.name", "box"}}, Error: "tool_error"})
	exp.Close(10 * time.Second)

	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.traces) != 1 || len(c.metrics) != 1 {
		t.Fatalf("%d trace and %d metric exports", len(c.traces), len(c.metrics))
	}
	if c.headers[0].Get("X-Api-Key") != "s ecret" || c.headers[0].Get("Other") != "ab+cd/ef==" {
		t.Errorf("headers %v", c.headers[0])
	}
	b, _ := json.Marshal(c.traces[0])
	for _, want := range []string{`"traceId":"4bf92f3577b34da6a3ce929d0e0e4736"`, `"parentSpanId":"00f067aa0ba902b7"`,
		`"name":"tools/call exec"`, `"kind":2`, `"code":2`, `{"key":"sandbox.name","value":{"stringValue":"box"}}`,
		`{"key":"service.name","value":{"stringValue":"sandbox-mcp"}}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("traces: missing %s in %s", want, b)
		}
	}
	b, _ = json.Marshal(c.metrics[0])
	for _, want := range []string{`"name":"sandbox_mcp.exec.duration"`, `"histogram"`, `"count":"1"`, `"aggregationTemporality":2`,
		`"name":"sandbox_mcp.telemetry.dropped_spans","sum"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics: missing %s in %.600s", want, b)
		}
	}
}

// TestADownEndpointCostsNothing: with an endpoint that refuses
// connections, or one that takes them and never answers, recording
// never waits, the queue stays bounded, what is lost is counted, and
// closing gives up in time.
func TestADownEndpointCostsNothing(t *testing.T) {
	refused, _ := net.Listen("tcp", "127.0.0.1:0")
	refusedURL := "http://" + refused.Addr().String()
	refused.Close()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release)
	for name, url := range map[string]string{"refused": refusedURL, "never answers": hang.URL} {
		t.Run(name, func(t *testing.T) {
			m := NewMetrics()
			exp, err := ExporterFromEnv(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_EXPORTER_OTLP_TIMEOUT": "200"}), m, "s", "v", nil)
			if err != nil {
				t.Fatal(err)
			}
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			done := make(chan struct{})
			go func() {
				for range 200_000 {
					exp.Offer(Span{Name: "tools/call exec", Start: time.Now(), End: time.Now(), Attrs: []Attr{{"a", "b"}}})
				}
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute): // a hang guard: recording must not wait
				t.Fatal("recording spans waited on the endpoint")
			}
			if len(exp.queue) > queueCap || exp.Dropped() < 200_000-queueCap-batchSize {
				t.Fatalf("queue %d, dropped %d", len(exp.queue), exp.Dropped())
			}
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 16<<20 {
				t.Fatalf("the heap grew by %d bytes", grew)
			}
			closed := make(chan struct{})
			go func() { exp.Close(3 * time.Second); close(closed) }()
			select {
			case <-closed:
			case <-time.After(time.Minute):
				t.Fatal("Close did not give up")
			}
		})
	}
}

func TestExporterSettings(t *testing.T) {
	if exp, err := ExporterFromEnv(env(nil), NewMetrics(), "s", "v", nil); exp != nil || err != nil {
		t.Fatalf("no endpoint: %v %v", exp, err)
	}
	for _, bad := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://user:pw@x"},
	} {
		if _, err := ExporterFromEnv(env(bad), NewMetrics(), "s", "v", nil); err == nil || strings.Contains(err.Error(), "pw") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	// Settings meant for other programs turn export off; the server runs.
	for _, off := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"},
	} {
		if exp, err := ExporterFromEnv(env(off), NewMetrics(), "s", "v", nil); exp != nil || err != nil {
			t.Errorf("%v: %v %v", off, exp, err)
		}
	}
	exp, err := ExporterFromEnv(env(map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:1/m"}), NewMetrics(), "s", "v", nil)
	if err != nil || exp.Tracing() || exp.metrics != "http://127.0.0.1:1/m" {
		t.Fatalf("metrics only: %+v %v", exp, err)
	}
	exp.Close(time.Second)
}

func TestTraceparent(t *testing.T) {
	tr, parent, span := NewIDs("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if hex.EncodeToString(tr[:]) != "4bf92f3577b34da6a3ce929d0e0e4736" || hex.EncodeToString(parent[:]) != "00f067aa0ba902b7" || span == ([8]byte{}) {
		t.Fatalf("%x %x %x", tr, parent, span)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-zz-00f067aa0ba902b7-01"} {
		tr, parent, _ := NewIDs(bad)
		if parent != ([8]byte{}) || tr == ([16]byte{}) {
			t.Errorf("%q: trace %x parent %x", bad, tr, parent)
		}
	}
}
