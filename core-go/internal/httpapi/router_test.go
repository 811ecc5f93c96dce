package httpapi

import (
	"github.com/gin-gonic/gin"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthAndReadiness(t *testing.T) {
	s := newServer(t, serverOpts{})
	rec := s.do(http.MethodGet, "/healthz", "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"ok"`) {
		t.Fatalf("healthz: %d %s", rec.Code, rec.Body)
	}
	rec = s.do(http.MethodGet, "/readyz", "")
	if rec.Code != http.StatusOK || rec.Body.String() != `{"checks":{"postgres":"ok","redis":"ok"},"status":"ready"}` {
		t.Fatalf("readyz: %d %s", rec.Code, rec.Body)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	s := newServer(t, serverOpts{})
	wantError(t, s.do(http.MethodGet, "/nope", ""), http.StatusNotFound, codeNotFound)
	wantError(t, s.do(http.MethodGet, "/api/v1/users/1/extra", ""), http.StatusNotFound, codeNotFound)
	// "/api/v1/users/" exists (an empty id, answered 400 invalid_id) for PATCH and DELETE only.
	wantError(t, s.do(http.MethodPost, "/api/v1/users/", `{}`), http.StatusMethodNotAllowed, codeMethodNotAllowed)
	rec := s.do(http.MethodGet, "/api/v1/users/1", "")
	wantError(t, rec, http.StatusMethodNotAllowed, codeMethodNotAllowed)
	if allow := rec.Header().Get("Allow"); !strings.Contains(allow, "PATCH") || !strings.Contains(allow, "DELETE") {
		t.Fatalf("Allow %q", allow)
	}
	wantError(t, s.do(http.MethodGet, "/api/v1/compute", ""), http.StatusMethodNotAllowed, codeMethodNotAllowed)
	wantError(t, s.do(http.MethodDelete, "/api/v1/users", ""), http.StatusMethodNotAllowed, codeMethodNotAllowed)
}

func TestPanicBecomesA500WithoutInternals(t *testing.T) {
	s := newServer(t, serverOpts{})
	s.router.GET("/boom", func(*gin.Context) { panic("secret detail") })
	rec := s.do(http.MethodGet, "/boom", "")
	wantError(t, rec, http.StatusInternalServerError, codeInternal)
	if body := rec.Body.String(); strings.Contains(body, "secret") || strings.Contains(body, "goroutine") || strings.Contains(body, ".go:") {
		t.Fatalf("500 body leaks internals: %s", body)
	}
	if logs := s.logs.String(); !strings.Contains(logs, "secret detail") || !strings.Contains(logs, "stack") {
		t.Fatalf("panic not logged with its stack: %s", logs)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	s.mustCreate(t, "ada", "ada@example.com")
	s.do(http.MethodGet, "/nope", "")
	s.do(http.MethodPost, "/api/v1/compute", `{"complexity":1}`)
	rec := s.do(http.MethodGet, "/metrics", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("metrics: %d", rec.Code)
	}
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`aside_core_http_requests_total{method="POST",route="/api/v1/users",status="201"} 1`,
		`aside_core_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
		`aside_core_http_requests_total{method="POST",route="/api/v1/compute",status="200"} 1`,
		`aside_core_http_request_duration_seconds_bucket{method="POST",route="/api/v1/users",le="+Inf"} 1`,
		`aside_core_cache_invalidations_total{result="ok"} 1`,
		`aside_core_cache_invalidations_total{result="error"} 0`,
		`aside_core_db_pool_max_conns 8`,
		`aside_core_db_pool_total_conns `,
		`aside_core_db_pool_acquired_conns 0`,
		`aside_core_compute_duration_seconds_count{kind="checksum"} 1`,
		`aside_core_info{profile="lab"} 1`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// Requests to random paths share one label value.
func TestMetricsRouteLabelIsBounded(t *testing.T) {
	s := newServer(t, serverOpts{})
	for _, p := range []string{"/a", "/b", "/c/d"} {
		s.do(http.MethodGet, p, "")
	}
	req := httptest.NewRequest("BREW", "/healthz", nil)
	s.send(req)
	text := s.do(http.MethodGet, "/metrics", "").Body.String()
	if !strings.Contains(text, `aside_core_http_requests_total{method="GET",route="unmatched",status="404"} 3`) {
		t.Fatalf("unmatched routes not pooled:\n%s", grep(text, "aside_core_http_requests_total"))
	}
	if strings.Contains(text, `method="BREW"`) {
		t.Fatal("an arbitrary method became a label value")
	}
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// With a separate metrics listener (production) the public router hides
// /metrics; the metrics handler serves it and nothing else.
func TestSeparateMetricsListener(t *testing.T) {
	s := newServer(t, serverOpts{separateMetrics: true})
	wantError(t, s.do(http.MethodGet, "/metrics", ""), http.StatusNotFound, codeNotFound)
	mux := MetricsMux(s.metrics)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `aside_core_http_requests_total{method="GET",route="unmatched",status="404"} 1`) {
		t.Fatalf("metrics listener: %d\n%s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/", "/healthz", "/api/v1/users"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusNotFound {
			t.Fatalf("metrics listener answers %s with %d", path, rec.Code)
		}
	}
}
