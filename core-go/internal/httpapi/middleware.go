package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// routeUnmatched labels requests that matched no route, so a scan of random
// paths cannot blow up the metric's cardinality.
const routeUnmatched = "unmatched"

// observeRequests counts and times every request by route template.
func observeRequests(requests *prometheus.CounterVec, duration *prometheus.HistogramVec) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = routeUnmatched
		}
		method := methodLabel(c.Request.Method)
		requests.WithLabelValues(route, method, strconv.Itoa(c.Writer.Status())).Inc()
		duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	}
}

func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// recoverJSON turns a panic into a 500 {"error":{"code":"internal"}}; the
// stack goes to the log, never into the body.
func recoverJSON(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if err, ok := r.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(r) // net/http's way to drop a connection on purpose
			}
			log.Error("panic while serving a request", "method", c.Request.Method,
				"path", c.Request.URL.Path, "panic", r, "stack", string(debug.Stack()))
			if c.Writer.Written() {
				c.Abort()
				return
			}
			abortWith(c, errInternal)
		}()
		c.Next()
	}
}

func notFound(*gin.Context) error {
	return &apiError{status: http.StatusNotFound, code: codeNotFound, message: "no such route"}
}

func methodNotAllowed(c *gin.Context) error {
	return &apiError{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed,
		message: c.Request.Method + " is not allowed here"}
}
