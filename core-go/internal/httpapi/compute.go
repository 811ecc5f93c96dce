package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aside-lab/aside/core-go/internal/compute"
)

// EngineGo is the only engine the core runs; the gateway runs "python" itself.
const EngineGo = "go"

type computeBody struct {
	Complexity json.RawMessage `json:"complexity"`
	Engine     json.RawMessage `json:"engine"`
}

type computeResult struct {
	Complexity int     `json:"complexity"`
	Engine     string  `json:"engine"`
	Checksum   int64   `json:"checksum"`
	ElapsedMS  float64 `json:"elapsed_ms"`
}

// computeDeps are what the compute handler needs.
type computeDeps struct {
	limiter  *compute.Limiter
	rejected prometheus.Counter
	duration prometheus.Observer
}

// computeRequest is a validated POST /api/v1/compute.
type computeRequest struct {
	complexity int
}

// parseCompute checks the body, the complexity, then the engine, and
// returns the first error.
func parseCompute(c *gin.Context) (computeRequest, error) {
	var req computeRequest
	var body computeBody
	if err := decodeObject(c, &body, "complexity", "engine"); err != nil {
		return req, err
	}
	var err error
	if req.complexity, err = parseComplexity(body.Complexity); err != nil {
		return req, err
	}
	if present(body.Engine) {
		if engine, ok := stringField(body.Engine); !ok || engine != EngineGo {
			return req, badRequest(codeInvalidRequest, `engine must be "go"; the core runs only the Go engine`)
		}
	}
	return req, nil
}

func computeChecksum(d computeDeps) handlerFunc {
	return func(c *gin.Context) error {
		req, err := parseCompute(c)
		if err != nil {
			return err
		}
		release, err := d.limiter.Acquire(c.Request.Context())
		if err != nil {
			if errors.Is(err, compute.ErrBusy) {
				d.rejected.Inc()
			}
			return unavailable(codeUnavailable, "compute is at its concurrency limit; retry later")
		}
		defer release()
		start := time.Now()
		sum, err := compute.Checksum(c.Request.Context(), req.complexity)
		elapsed := time.Since(start)
		if err != nil {
			// The client went away; nobody reads this answer.
			return unavailable(codeUnavailable, "request cancelled")
		}
		d.duration.Observe(elapsed.Seconds())
		c.JSON(http.StatusOK, computeResult{Complexity: req.complexity, Engine: EngineGo, Checksum: sum,
			ElapsedMS: float64(elapsed.Nanoseconds()) / 1e6})
		return nil
	}
}

// parseComplexity accepts only a JSON integer literal from 1 to 1000: not
// 1.5, 1.0, 1e2, "10", true or null.
func parseComplexity(raw json.RawMessage) (int, error) {
	invalid := badRequest(codeInvalidComplexity, "complexity must be an integer from 1 to 1000")
	if !present(raw) {
		return 0, badRequest(codeInvalidComplexity, "complexity is required (an integer from 1 to 1000)")
	}
	lit := bytes.TrimSpace(raw)
	digits := bytes.TrimPrefix(lit, []byte("-"))
	if len(digits) == 0 || len(digits) > 8 {
		return 0, invalid
	}
	for _, b := range digits {
		if b < '0' || b > '9' {
			return 0, invalid
		}
	}
	n, err := strconv.Atoi(string(lit))
	if err != nil || n < compute.MinComplexity || n > compute.MaxComplexity {
		return 0, invalid
	}
	return n, nil
}
