package httpapi

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// Check is one dependency readiness looks at.
type Check struct {
	Name string
	// Ping must return within timeout.
	Ping func(ctx context.Context) error
}

// readyTimeout bounds each readiness check: a probe must answer quickly.
const readyTimeout = time.Second

func healthz(c *gin.Context) error {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
	return nil
}

// readyz is 200 when every dependency answers, else 503 naming the ones that
// did not. The checks run in parallel, each under readyTimeout.
func readyz(checks []Check) handlerFunc {
	return func(c *gin.Context) error {
		results := make([]error, len(checks))
		var wg sync.WaitGroup
		for i, check := range checks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(c.Request.Context(), readyTimeout)
				defer cancel()
				results[i] = check.Ping(ctx)
			}()
		}
		wg.Wait()
		status := gin.H{}
		var down []string
		for i, check := range checks {
			if results[i] != nil {
				down = append(down, check.Name)
				status[check.Name] = "down"
			} else {
				status[check.Name] = "ok"
			}
		}
		if len(down) > 0 {
			return unavailable(codeUnavailable, "not ready: cannot reach "+strings.Join(down, ", "))
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": status})
		return nil
	}
}
