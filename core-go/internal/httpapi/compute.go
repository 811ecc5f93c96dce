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

func computeChecksum(d computeDeps) gin.HandlerFunc {
	return func(c *gin.Context) {
		var body computeBody
		if e := decodeObject(c, &body, "complexity", "engine"); e != nil {
			abortWith(c, e)
			return
		}
		n, e := parseComplexity(body.Complexity)
		if e != nil {
			abortWith(c, e)
			return
		}
		if present(body.Engine) {
			if engine, ok := stringField(body.Engine); !ok || engine != EngineGo {
				abortWith(c, badRequest(codeInvalidRequest, `engine must be "go"; the core runs only the Go engine`))
				return
			}
		}
		release, err := d.limiter.Acquire(c.Request.Context())
		if err != nil {
			if errors.Is(err, compute.ErrBusy) {
				d.rejected.Inc()
			}
			abortUnavailable(c, codeUnavailable, "compute is at its concurrency limit; retry later")
			return
		}
		defer release()
		start := time.Now()
		sum, err := compute.Checksum(c.Request.Context(), n)
		elapsed := time.Since(start)
		if err != nil {
			// The client went away; nobody reads this answer.
			abortUnavailable(c, codeUnavailable, "request cancelled")
			return
		}
		d.duration.Observe(elapsed.Seconds())
		c.JSON(http.StatusOK, computeResult{Complexity: n, Engine: EngineGo, Checksum: sum,
			ElapsedMS: float64(elapsed.Nanoseconds()) / 1e6})
	}
}

// parseComplexity accepts only a JSON integer literal from 1 to 1000: not
// 1.5, 1.0, 1e2, "10", true or null.
func parseComplexity(raw json.RawMessage) (int, *apiError) {
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
