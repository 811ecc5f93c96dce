package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/aside-lab/aside/core-go/internal/compute"
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
			fmt.Sprintf(`{"kind":"checksum","complexity":%d}`, v.Complexity),
		} {
			rec := s.do(http.MethodPost, "/api/v1/compute", body)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			var res checksumResult
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&res); err != nil || len(got) != 5 {
				t.Fatalf("%s: body %s: %v", body, rec.Body, err)
			}
			if res.Kind != "checksum" || res.Complexity != v.Complexity || res.Engine != "go" || res.Checksum != v.Checksum || res.ElapsedMS <= 0 {
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

type hashVectors struct {
	Secrets struct {
		InvalidPasswords []json.RawMessage `json:"invalid_passwords"`
	} `json:"secrets"`
	PBKDF2 struct {
		Vectors []struct {
			Password   string `json:"password"`
			Salt       string `json:"salt"`
			Iterations int    `json:"iterations"`
			DerivedKey string `json:"derived_key"`
		} `json:"vectors"`
		InvalidIterations []json.RawMessage `json:"invalid_iterations"`
	} `json:"pbkdf2"`
	Bcrypt struct {
		HashPattern   string `json:"hash_pattern"`
		VerifyVectors []struct {
			Password string `json:"password"`
			Hash     string `json:"hash"`
			Match    bool   `json:"match"`
		} `json:"verify_vectors"`
		InvalidCosts     []json.RawMessage `json:"invalid_costs"`
		InvalidHashes    []json.RawMessage `json:"invalid_hashes"`
		OutOfRangeHashes []string          `json:"out_of_range_hashes"`
	} `json:"bcrypt"`
}

// jsonText encodes v as a JSON literal for a request body.
func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// computeOK posts body and decodes the 200 answer, refusing unknown fields.
func computeOK(t *testing.T, s *testServer, body string, dst any) {
	t.Helper()
	rec := s.do(http.MethodPost, "/api/v1/compute", body)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
	}
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
}

func TestComputePBKDF2VectorsThroughTheAPI(t *testing.T) {
	var c hashVectors
	testenv.LoadContract(t, "compute.json", &c)
	s := newServer(t, serverOpts{})
	for _, v := range c.PBKDF2.Vectors {
		body := fmt.Sprintf(`{"kind":"pbkdf2","engine":"go","password":%s,"salt":%s,"iterations":%d}`,
			jsonText(t, v.Password), jsonText(t, v.Salt), v.Iterations)
		var res pbkdf2Result
		computeOK(t, s, body, &res)
		if res.Kind != "pbkdf2" || res.Engine != "go" || res.Iterations != v.Iterations || res.DerivedKey != v.DerivedKey || res.ElapsedMS <= 0 {
			t.Errorf("%s: %+v, want %s", body, res, v.DerivedKey)
		}
	}
	// Without iterations: the default, which the last vector uses.
	last := c.PBKDF2.Vectors[len(c.PBKDF2.Vectors)-1]
	var res pbkdf2Result
	computeOK(t, s, fmt.Sprintf(`{"kind":"pbkdf2","password":%s,"salt":%s}`, jsonText(t, last.Password), jsonText(t, last.Salt)), &res)
	if res.Iterations != compute.PBKDF2DefaultIterations || res.DerivedKey != last.DerivedKey {
		t.Fatalf("default iterations: %+v, want %d iterations and %s", res, compute.PBKDF2DefaultIterations, last.DerivedKey)
	}
}

func TestComputeBcryptThroughTheAPI(t *testing.T) {
	var c hashVectors
	testenv.LoadContract(t, "compute.json", &c)
	s := newServer(t, serverOpts{})
	for _, v := range c.Bcrypt.VerifyVectors {
		body := fmt.Sprintf(`{"kind":"bcrypt","password":%s,"hash":%s}`, jsonText(t, v.Password), jsonText(t, v.Hash))
		var res bcryptResult
		computeOK(t, s, body, &res)
		wantCost, _ := compute.BcryptCost(v.Hash)
		if res.Kind != "bcrypt" || res.Engine != "go" || res.Match == nil || *res.Match != v.Match || res.Hash != "" || res.Cost != wantCost {
			t.Errorf("%s: %+v, want match %v", body, res, v.Match)
		}
	}
	pattern := regexp.MustCompile(c.Bcrypt.HashPattern)
	var hashed bcryptResult
	computeOK(t, s, `{"kind":"bcrypt","password":"hunter2","cost":5}`, &hashed)
	if hashed.Cost != 5 || !pattern.MatchString(hashed.Hash) || hashed.Hash[4:7] != "05$" || hashed.Match != nil {
		t.Fatalf("hash at cost 5: %+v", hashed)
	}
	var verified bcryptResult
	computeOK(t, s, fmt.Sprintf(`{"kind":"bcrypt","password":"hunter2","hash":%q}`, hashed.Hash), &verified)
	if verified.Match == nil || !*verified.Match || verified.Cost != 5 {
		t.Fatalf("the core's own hash does not verify: %+v", verified)
	}
	computeOK(t, s, `{"kind":"bcrypt","password":"hunter2"}`, &hashed)
	if hashed.Cost != compute.BcryptDefaultCost || hashed.Hash[4:7] != fmt.Sprintf("%02d$", compute.BcryptDefaultCost) {
		t.Fatalf("default cost: %+v", hashed)
	}
}

// Every refusal is a 400 with its code, before any work runs.
func TestComputeRejectsBadKindsAndParameters(t *testing.T) {
	var c hashVectors
	testenv.LoadContract(t, "compute.json", &c)
	s := newServer(t, serverOpts{})
	type bad struct {
		body string
		code string
	}
	cases := []bad{
		{`{"kind":"scrypt","password":"p"}`, codeInvalidRequest},
		{`{"kind":"PBKDF2","password":"p","salt":"s"}`, codeInvalidRequest},
		{`{"kind":null,"complexity":1}`, codeInvalidRequest},
		{`{"kind":1,"complexity":1}`, codeInvalidRequest},
		{`{"kind":"checksum","complexity":1,"cost":5}`, codeUnknownField},
		{`{"complexity":1,"password":"p"}`, codeUnknownField},
		{`{"kind":"pbkdf2","password":"p","salt":"s","complexity":1}`, codeUnknownField},
		{`{"kind":"pbkdf2","password":"p","salt":"s","cost":5}`, codeUnknownField},
		{`{"kind":"bcrypt","password":"p","salt":"s"}`, codeUnknownField},
		{`{"kind":"bcrypt","password":"p","iterations":5}`, codeUnknownField},
		{`{"kind":"pbkdf2","password":"p","salt":"s","pepper":"x"}`, codeUnknownField},
		{`{"kind":"pbkdf2","salt":"s"}`, codeInvalidRequest},
		{`{"kind":"pbkdf2","password":"p"}`, codeInvalidRequest},
		{`{"kind":"pbkdf2","password":"p","salt":""}`, codeInvalidRequest},
		{`{"kind":"pbkdf2","password":"p","salt":"` + strings.Repeat("s", compute.SaltMaxBytes+1) + `"}`, codeInvalidRequest},
		{`{"kind":"bcrypt"}`, codeInvalidRequest},
		{`{"kind":"bcrypt","password":"p","cost":5,"hash":"` + c.Bcrypt.VerifyVectors[0].Hash + `"}`, codeInvalidRequest},
		{`{"kind":"pbkdf2","password":"p","salt":"s","iterations":1,"engine":"python"}`, codeInvalidRequest},
		{`{"kind":"bcrypt","password":"p","cost":4,"engine":"rust"}`, codeInvalidRequest},
	}
	for _, raw := range c.PBKDF2.InvalidIterations {
		cases = append(cases, bad{`{"kind":"pbkdf2","password":"p","salt":"s","iterations":` + string(raw) + `}`, codeInvalidCost})
	}
	for _, raw := range c.Bcrypt.InvalidCosts {
		cases = append(cases, bad{`{"kind":"bcrypt","password":"p","cost":` + string(raw) + `}`, codeInvalidCost})
	}
	for _, raw := range c.Bcrypt.InvalidHashes {
		cases = append(cases, bad{`{"kind":"bcrypt","password":"p","hash":` + string(raw) + `}`, codeInvalidRequest})
	}
	for _, h := range c.Bcrypt.OutOfRangeHashes {
		cases = append(cases, bad{`{"kind":"bcrypt","password":"p","hash":"` + h + `"}`, codeInvalidCost})
	}
	for _, raw := range c.Secrets.InvalidPasswords {
		cases = append(cases,
			bad{`{"kind":"bcrypt","password":` + string(raw) + `,"cost":4}`, codeInvalidRequest},
			bad{`{"kind":"pbkdf2","password":` + string(raw) + `,"salt":"s","iterations":1}`, codeInvalidRequest},
			bad{`{"kind":"pbkdf2","password":"p","salt":` + string(raw) + `,"iterations":1}`, codeInvalidRequest})
	}
	for _, tc := range cases {
		wantError(t, s.do(http.MethodPost, "/api/v1/compute", tc.body), http.StatusBadRequest, tc.code)
	}
	// The limits are inclusive: 72 bytes of password, 64 of salt, in bytes.
	var res pbkdf2Result
	computeOK(t, s, fmt.Sprintf(`{"kind":"pbkdf2","password":"%s","salt":"%s","iterations":1}`,
		strings.Repeat("\u00e9", compute.PasswordMaxBytes/2), strings.Repeat("s", compute.SaltMaxBytes)), &res)
	if len(res.DerivedKey) != 2*compute.PBKDF2KeyBytes {
		t.Fatalf("derived key %q", res.DerivedKey)
	}
}
