package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aside-lab/aside/core-go/internal/testenv"
)

type computeVectors struct {
	Vectors []struct {
		Complexity int   `json:"complexity"`
		Checksum   int64 `json:"checksum"`
	} `json:"vectors"`
	Invalid []json.RawMessage `json:"invalid"`
}

func TestComputeVectorsThroughTheAPI(t *testing.T) {
	var c computeVectors
	testenv.LoadContract(t, "compute.json", &c)
	s := newServer(t, serverOpts{})
	for _, v := range c.Vectors {
		for _, body := range []string{
			fmt.Sprintf(`{"complexity":%d}`, v.Complexity),
			fmt.Sprintf(`{"complexity":%d,"engine":"go"}`, v.Complexity),
		} {
			rec := s.do(http.MethodPost, "/api/v1/compute", body)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			var res computeResult
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&res); err != nil || len(got) != 4 {
				t.Fatalf("%s: body %s: %v", body, rec.Body, err)
			}
			if res.Complexity != v.Complexity || res.Engine != "go" || res.Checksum != v.Checksum || res.ElapsedMS <= 0 {
				t.Fatalf("%s: %+v, want checksum %d", body, res, v.Checksum)
			}
			if v.Complexity == 1000 {
				break // one run of the largest is enough
			}
		}
	}
}

func TestComputeRejectsInvalidComplexity(t *testing.T) {
	var c computeVectors
	testenv.LoadContract(t, "compute.json", &c)
	if len(c.Invalid) == 0 {
		t.Fatal("no invalid vectors")
	}
	s := newServer(t, serverOpts{})
	bodies := []string{`{}`, `{"engine":"go"}`, `{"complexity":1.0}`, `{"complexity":1e2}`, `{"complexity":-0}`,
		`{"complexity":99999999999999999999}`, `{"complexity":[5]}`}
	for _, raw := range c.Invalid {
		bodies = append(bodies, `{"complexity":`+string(raw)+`}`)
	}
	for _, body := range bodies {
		wantError(t, s.do(http.MethodPost, "/api/v1/compute", body), http.StatusBadRequest, codeInvalidComplexity)
	}
	for _, body := range []string{`{"complexity":5,"engine":"python"}`, `{"complexity":5,"engine":null}`, `{"complexity":5,"engine":1}`} {
		wantError(t, s.do(http.MethodPost, "/api/v1/compute", body), http.StatusBadRequest, codeInvalidRequest)
	}
	wantError(t, s.do(http.MethodPost, "/api/v1/compute", `{"complexity":5,"n":1}`), http.StatusBadRequest, codeUnknownField)
	wantError(t, s.do(http.MethodPost, "/api/v1/compute", `{"complexity":5`), http.StatusBadRequest, codeInvalidJSON)
}

// With every slot taken, a request waits the queue time, then gets a 503
// with Retry-After instead of piling onto the CPU.
func TestComputeShedsLoadAtTheConcurrencyLimit(t *testing.T) {
	s := newServer(t, serverOpts{computeMax: 1, computeWait: 1})
	release, err := s.limiter.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rec := s.do(http.MethodPost, "/api/v1/compute", `{"complexity":1}`)
	wantError(t, rec, http.StatusServiceUnavailable, codeUnavailable)
	if rec.Header().Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	if got := testutil.ToFloat64(s.metrics.ComputeRejected); got != 1 {
		t.Fatalf("rejected = %v", got)
	}
	release()
	if rec := s.do(http.MethodPost, "/api/v1/compute", `{"complexity":1}`); rec.Code != http.StatusOK {
		t.Fatalf("after release: %d %s", rec.Code, rec.Body)
	}
}
