package httpapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// testDelayHeader holds a request's answer for that many milliseconds after
// its handler has done its work (a write committed and invalidated). Served
// only with ASIDE_TEST_HOOKS=1, which the lab profile alone allows: it is
// how the tests make the gateway give up on a write that was applied.
const testDelayHeader = "X-Test-Delay-Ms"

// maxTestDelayMs bounds the hold well inside the server's write timeout.
const maxTestDelayMs = 10_000

// holdAnswers delays the answer of a request carrying testDelayHeader.
func holdAnswers() gin.HandlerFunc {
	return func(c *gin.Context) {
		raw := c.GetHeader(testDelayHeader)
		if raw == "" {
			c.Next()
			return
		}
		ms, err := strconv.Atoi(raw)
		if err != nil || ms < 1 || ms > maxTestDelayMs {
			abortWith(c, badRequest(codeInvalidRequest,
				testDelayHeader+" must be an integer from 1 to "+strconv.Itoa(maxTestDelayMs)))
			return
		}
		held := &heldWriter{ResponseWriter: c.Writer, delay: time.Duration(ms) * time.Millisecond}
		c.Writer = held
		c.Next()
		held.hold() // an answer without a body (204) is sent after the handlers return
	}
}

// heldWriter waits once before the first byte of the answer goes out.
type heldWriter struct {
	gin.ResponseWriter
	delay time.Duration
	once  sync.Once
}

func (w *heldWriter) hold() { w.once.Do(func() { time.Sleep(w.delay) }) }

func (w *heldWriter) WriteHeaderNow() {
	w.hold()
	w.ResponseWriter.WriteHeaderNow()
}

func (w *heldWriter) Write(b []byte) (int, error) {
	w.hold()
	return w.ResponseWriter.Write(b)
}

func (w *heldWriter) WriteString(s string) (int, error) {
	w.hold()
	return w.ResponseWriter.WriteString(s)
}
