package httpapi

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aside-lab/aside/core-go/internal/compute"
)

// EngineGo is the only engine the core runs; the gateway runs "python" itself.
const EngineGo = "go"

type computeBody struct {
	Kind       json.RawMessage `json:"kind"`
	Engine     json.RawMessage `json:"engine"`
	Complexity json.RawMessage `json:"complexity"`
	Password   json.RawMessage `json:"password"`
	Salt       json.RawMessage `json:"salt"`
	Iterations json.RawMessage `json:"iterations"`
	Cost       json.RawMessage `json:"cost"`
	Hash       json.RawMessage `json:"hash"`
}

// given lists the fields the body carries, in a fixed order.
func (b computeBody) given() []string {
	var names []string
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"kind", b.Kind}, {"engine", b.Engine}, {"complexity", b.Complexity}, {"password", b.Password},
		{"salt", b.Salt}, {"iterations", b.Iterations}, {"cost", b.Cost}, {"hash", b.Hash}} {
		if present(f.raw) {
			names = append(names, f.name)
		}
	}
	return names
}

// computeFields are the fields a body of each kind may carry
// (contracts/compute.json "fields").
var computeFields = map[string][]string{
	compute.KindChecksum: {"kind", "engine", "complexity"},
	compute.KindPBKDF2:   {"kind", "engine", "password", "salt", "iterations"},
	compute.KindBcrypt:   {"kind", "engine", "password", "cost", "hash"},
}

var allComputeFields = []string{"kind", "engine", "complexity", "password", "salt", "iterations", "cost", "hash"}

type checksumResult struct {
	Kind       string  `json:"kind"`
	Engine     string  `json:"engine"`
	Complexity int     `json:"complexity"`
	Checksum   int64   `json:"checksum"`
	ElapsedMS  float64 `json:"elapsed_ms"`
}

type pbkdf2Result struct {
	Kind       string  `json:"kind"`
	Engine     string  `json:"engine"`
	Iterations int     `json:"iterations"`
	DerivedKey string  `json:"derived_key"`
	ElapsedMS  float64 `json:"elapsed_ms"`
}

// bcryptResult carries hash after hashing, match after verifying.
type bcryptResult struct {
	Kind      string  `json:"kind"`
	Engine    string  `json:"engine"`
	Cost      int     `json:"cost"`
	Hash      string  `json:"hash,omitempty"`
	Match     *bool   `json:"match,omitempty"`
	ElapsedMS float64 `json:"elapsed_ms"`
}

// computeDeps are what the compute handler needs.
type computeDeps struct {
	limiter  *compute.Limiter
	rejected prometheus.Counter
	duration *prometheus.HistogramVec
}

// computeRequest is a validated POST /api/v1/compute.
type computeRequest struct {
	kind       string
	complexity int
	password   []byte
	salt       []byte
	iterations int
	cost       int
	hash       string // bcrypt: verify against this hash instead of hashing
}

// parseCompute checks the body, the kind, the fields of that kind, its
// parameters, then the engine, and returns the first error.
func parseCompute(c *gin.Context) (computeRequest, error) {
	req := computeRequest{kind: compute.KindChecksum}
	var body computeBody
	if err := decodeObject(c, &body, allComputeFields...); err != nil {
		return req, err
	}
	if present(body.Kind) {
		kind, ok := stringField(body.Kind)
		if _, known := computeFields[kind]; !ok || !known {
			return req, badRequest(codeInvalidRequest, "kind must be one of "+strings.Join(compute.Kinds, ", "))
		}
		req.kind = kind
	}
	for _, name := range body.given() {
		if !contains(computeFields[req.kind], name) {
			return req, badRequest(codeUnknownField, fmt.Sprintf("field %q does not belong to kind %s", name, req.kind))
		}
	}
	var err error
	switch req.kind {
	case compute.KindChecksum:
		req.complexity, err = parseComplexity(body.Complexity)
	case compute.KindPBKDF2:
		err = parsePBKDF2(body, &req)
	case compute.KindBcrypt:
		err = parseBcrypt(body, &req)
	}
	if err != nil {
		return req, err
	}
	if present(body.Engine) {
		if engine, ok := stringField(body.Engine); !ok || engine != EngineGo {
			return req, badRequest(codeInvalidRequest, `engine must be "go"; the core runs only the Go engine`)
		}
	}
	return req, nil
}

func parsePBKDF2(body computeBody, req *computeRequest) error {
	var err error
	if req.password, err = parseSecret("password", body.Password, compute.PasswordMaxBytes); err != nil {
		return err
	}
	if req.salt, err = parseSecret("salt", body.Salt, compute.SaltMaxBytes); err != nil {
		return err
	}
	req.iterations, err = parseCost("iterations", body.Iterations, compute.PBKDF2MinIterations,
		compute.PBKDF2MaxIterations, compute.PBKDF2DefaultIterations)
	return err
}

func parseBcrypt(body computeBody, req *computeRequest) error {
	var err error
	if req.password, err = parseSecret("password", body.Password, compute.PasswordMaxBytes); err != nil {
		return err
	}
	if !present(body.Hash) {
		req.cost, err = parseCost("cost", body.Cost, compute.BcryptMinCost, compute.BcryptMaxCost, compute.BcryptDefaultCost)
		return err
	}
	if present(body.Cost) {
		return badRequest(codeInvalidRequest, "give cost to hash or hash to verify, not both")
	}
	hash, ok := stringField(body.Hash)
	cost, err := compute.BcryptCost(hash)
	if !ok || err != nil {
		return badRequest(codeInvalidRequest, "hash must be a bcrypt hash: $2a$, $2b$ or $2y$, two cost digits, 53 characters of ./A-Za-z0-9")
	}
	if cost < compute.BcryptMinCost || cost > compute.BcryptMaxCost {
		return badRequest(codeInvalidCost, fmt.Sprintf("the hash's cost must be from %d to %d", compute.BcryptMinCost, compute.BcryptMaxCost))
	}
	req.hash, req.cost = hash, cost
	return nil
}

// parseSecret accepts a JSON string of 1 to max bytes of UTF-8 without
// U+0000 (bcrypt implementations disagree on it) and without a lone
// surrogate escape, which has no UTF-8 form.
func parseSecret(name string, raw json.RawMessage, max int) ([]byte, error) {
	rule := fmt.Sprintf("%s must be a string of 1 to %d bytes of UTF-8 without U+0000", name, max)
	if !present(raw) {
		return nil, badRequest(codeInvalidRequest, name+" is required: "+rule)
	}
	s, ok := stringField(raw)
	if !ok || len(s) == 0 || len(s) > max || strings.ContainsRune(s, 0) || hadLoneSurrogate(raw, s) {
		return nil, badRequest(codeInvalidRequest, rule)
	}
	return []byte(s), nil
}

// parseCost reads an optional integer work parameter (PBKDF2's iterations,
// bcrypt's cost): absent means def.
func parseCost(name string, raw json.RawMessage, lo, hi, def int) (int, error) {
	if !present(raw) {
		return def, nil
	}
	n, ok := intLiteral(raw)
	if !ok || n < lo || n > hi {
		return 0, badRequest(codeInvalidCost, fmt.Sprintf("%s must be an integer from %d to %d", name, lo, hi))
	}
	return n, nil
}

func computeWork(d computeDeps) handlerFunc {
	return func(c *gin.Context) error {
		req, err := parseCompute(c)
		if err != nil {
			return err
		}
		release, err := acquireSlot(c.Request.Context(), d.limiter, d.rejected, "compute")
		if err != nil {
			return err
		}
		defer release()
		start := time.Now()
		result, err := doCompute(c, req, start)
		if err != nil {
			return err
		}
		d.duration.WithLabelValues(req.kind).Observe(time.Since(start).Seconds())
		c.JSON(http.StatusOK, result)
		return nil
	}
}

// acquireSlot takes a slot of limiter for a CPU-heavy handler (what names
// the work); a full queue is counted in rejected and answered 503 with
// Retry-After, so the client retries later.
func acquireSlot(ctx context.Context, limiter *compute.Limiter, rejected prometheus.Counter, what string) (func(), error) {
	release, err := limiter.Acquire(ctx)
	if err != nil {
		if errors.Is(err, compute.ErrBusy) {
			rejected.Inc()
		}
		return nil, unavailable(codeUnavailable, what+" is at its concurrency limit; retry later")
	}
	return release, nil
}

// doCompute does the work of req; elapsed_ms is measured from start.
func doCompute(c *gin.Context, req computeRequest, start time.Time) (any, error) {
	elapsed := func() float64 { return float64(time.Since(start).Nanoseconds()) / 1e6 }
	switch req.kind {
	case compute.KindPBKDF2:
		key, err := compute.PBKDF2(req.password, req.salt, req.iterations)
		if err != nil {
			return nil, err
		}
		return pbkdf2Result{Kind: req.kind, Engine: EngineGo, Iterations: req.iterations,
			DerivedKey: hex.EncodeToString(key), ElapsedMS: elapsed()}, nil
	case compute.KindBcrypt:
		if req.hash != "" {
			match, err := compute.BcryptVerify(req.password, req.hash)
			if err != nil {
				return nil, err
			}
			return bcryptResult{Kind: req.kind, Engine: EngineGo, Cost: req.cost, Match: &match, ElapsedMS: elapsed()}, nil
		}
		hash, err := compute.BcryptHash(req.password, req.cost)
		if err != nil {
			return nil, err
		}
		return bcryptResult{Kind: req.kind, Engine: EngineGo, Cost: req.cost, Hash: hash, ElapsedMS: elapsed()}, nil
	}
	sum, err := compute.Checksum(c.Request.Context(), req.complexity)
	if err != nil {
		// The client went away; nobody reads this answer.
		return nil, unavailable(codeUnavailable, "request cancelled")
	}
	return checksumResult{Kind: req.kind, Engine: EngineGo, Complexity: req.complexity, Checksum: sum,
		ElapsedMS: elapsed()}, nil
}

// parseComplexity accepts only a JSON integer literal from 1 to 1000: not
// 1.5, 1.0, 1e2, "10", true or null.
func parseComplexity(raw json.RawMessage) (int, error) {
	if !present(raw) {
		return 0, badRequest(codeInvalidComplexity, "complexity is required (an integer from 1 to 1000)")
	}
	n, ok := intLiteral(raw)
	if !ok || n < compute.MinComplexity || n > compute.MaxComplexity {
		return 0, badRequest(codeInvalidComplexity, "complexity must be an integer from 1 to 1000")
	}
	return n, nil
}

// intLiteral reads a JSON integer literal of at most 8 digits: not 1.5,
// 1.0, 1e2, "10", true or null.
func intLiteral(raw json.RawMessage) (int, bool) {
	lit := bytes.TrimSpace(raw)
	digits := bytes.TrimPrefix(lit, []byte("-"))
	if len(digits) == 0 || len(digits) > 8 {
		return 0, false
	}
	for _, b := range digits {
		if b < '0' || b > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(string(lit))
	return n, err == nil
}
