package scenario_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"aside/bench/driver/internal/scenario"
)

// breakingServer answers its first request (keep-alive) and closes the
// connection after reading any later one: a reused connection that breaks.
func breakingServer(t *testing.T) (addr string, seen *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	seen = &atomic.Int64{}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if seen.Add(1) > 1 {
						return
					}
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	return ln.Addr().String(), seen
}

func TestNoRetryOnABrokenConnection(t *testing.T) {
	addr, seen := breakingServer(t)
	client := newClient(t, "http://"+addr, 2*time.Second)
	h := newHarness(t, client, scenario.NewHealthz(client), 2*time.Second)
	if !h.iterate() {
		t.Fatal("the first request failed")
	}
	if h.iterate() {
		t.Fatal("the request over the broken connection passed")
	}
	if got := seen.Load(); got != 2 {
		t.Fatalf("the server saw %d requests, want 2 (one attempt each)", got)
	}
	s := h.sink.all()
	if s[1].Status != 0 {
		t.Errorf("status %d on a broken connection", s[1].Status)
	}
	if code, _ := tagOf(s[1], "error"); code != "connection_closed" {
		t.Errorf("error tag %q", code)
	}
}

// The server above does provoke fasthttp's silent resend when left at its
// defaults: the test above would see it.
func TestBreakingServerProvokesDefaultRetry(t *testing.T) {
	addr, seen := breakingServer(t)
	hc := &fasthttp.HostClient{Addr: addr}
	for range 2 {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + addr + "/healthz")
		hc.DoTimeout(req, resp, 2*time.Second)
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if got := seen.Load(); got < 3 {
		t.Fatalf("default fasthttp sent %d requests, expected a resend (>= 3)", got)
	}
}

func TestNewConn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	h := newHarness(t, client, scenario.NewHealthz(client), 2*time.Second)
	for range 3 {
		h.iterate()
	}
	noReuse := newHarness(t, client, scenario.NewChaos(client, "p", 0, 0, true, []string{"h@x"}, []int64{1}), 2*time.Second)
	for range 2 {
		noReuse.iterate()
	}
	var got []bool
	for _, s := range append(h.sink.all(), noReuse.sink.all()...) {
		got = append(got, s.NewConn)
	}
	want := []bool{true, false, false, false, true}
	if len(got) != len(want) {
		t.Fatalf("samples %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("new_conn %v, want %v", got, want)
		}
	}
	if d := client.Dials(); d != 2 { // the first Connection: close request reuses the idle one
		t.Errorf("%d dials, want 2", d)
	}
}

func TestComputeCheck(t *testing.T) {
	body := `{"kind":"checksum","engine":"go","checksum":462500000,"ms":3.2}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != "POST" || r.URL.Path != "/api/v1/compute" || !strings.Contains(string(b), "complexity") ||
			r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(400)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	client := newClient(t, srv.URL, 2*time.Second)
	expect := map[string]any{"kind": "checksum", "engine": "go", "checksum": float64(462500000)}
	c := scenario.NewCompute("compute", client, []byte(`{"kind":"checksum","engine":"go","complexity":10}`), expect, nil)
	h := newHarness(t, client, c, 2*time.Second)
	if !h.iterate() {
		t.Fatal("a right compute answer failed")
	}
	body = `{"kind":"checksum","engine":"go","checksum":1}`
	if h.iterate() {
		t.Fatal("a wrong checksum passed")
	}
}

// Open reaches n against a server that answers at once, where a round's
// requests may hand connections on to each other instead of each opening one.
func TestOpenReachesNAgainstAQuickServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	for _, n := range []int{1, 50, 200} {
		client, err := scenario.NewClient(srv.URL, n, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := client.Open(n, "/healthz", time.Now().Add(10*time.Second)); got < int64(n) {
			t.Errorf("Open(%d) opened %d", n, got)
		}
		client.CloseIdle()
	}
}
