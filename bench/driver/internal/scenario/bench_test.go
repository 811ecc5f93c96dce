package scenario_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"aside/bench/driver/internal/record"
	"aside/bench/driver/internal/scenario"
)

var benchHot = func() []string {
	var out []string
	for i := range 100 {
		out = append(out, fmt.Sprintf("hot%d@example.com", i))
	}
	return out
}()

// benchRead runs one read iteration per op, recorded as the driver records
// it (no samples file, the default).
func benchRead(b *testing.B, url string) {
	client := newClient(b, url, 5*time.Second)
	scn := scenario.NewRead("read", client, "l2", 0.9, benchHot, benchHot[:10], false)
	rec := record.NewRecorder("read", 1, 1, scn.Names(), 5*time.Second)
	env := &scenario.Env{Client: client, Rec: rec, Clock: record.NewClock(time.Now()), Timeout: 5 * time.Second, Seed: 1}
	w := scenario.NewWorker(env, 1)
	defer w.Release()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		w.Begin(uint64(i+1), env.Clock.Now())
		if !scn.Iterate(w) {
			b.Fatal("read check failed")
		}
		w.Iter++
	}
	b.StopTimer()
	if rec.Totals().Requests != int64(b.N) {
		b.Fatal("requests not recorded")
	}
}

// A count answer of the gateway's shape for the email in the query.
func countBody(emailArg []byte) []byte {
	return fmt.Appendf(nil, `{"email":%q,"count":1}`, emailArg)
}

// BenchmarkReadIteration: against an httptest (net/http) server, whose own
// allocations count in allocs/op.
func BenchmarkReadIteration(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Cache", "MISS")
		w.Write(countBody([]byte(r.URL.Query().Get("email"))))
	}))
	defer srv.Close()
	benchRead(b, srv.URL)
}

// BenchmarkReadIterationFastServer: the same against a fasthttp server,
// which allocates next to nothing: allocs/op is the driver's own.
func BenchmarkReadIterationFastServer(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	bodies := map[string][]byte{}
	for _, e := range benchHot {
		bodies[e] = countBody([]byte(e))
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Cache", "MISS")
		ctx.SetBody(bodies[string(ctx.QueryArgs().Peek("email"))])
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()
	benchRead(b, "http://"+ln.Addr().String())
}
