package scenario

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Client sends a step's requests to one base URL: one fasthttp.HostClient
// whose every request is one attempt (no silent resend when a reused
// connection breaks), and whose dial marks the new connection so the first
// request over it can say it opened it.
type Client struct {
	hc    *fasthttp.HostClient
	base  string
	dials atomic.Int64
}

// maxIdle is how long an unused connection is kept.
const maxIdle = 5 * time.Second

// NewClient is a client of base (http(s)://host[:port]) holding at most maxConns connections.
func NewClient(base string, maxConns int, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad base URL %q", base)
	}
	tls := u.Scheme == "https"
	addr := u.Host
	if u.Port() == "" {
		if tls {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	c := &Client{base: strings.TrimRight(base, "/")}
	c.hc = &fasthttp.HostClient{
		Addr:               addr,
		IsTLS:              tls,
		Name:               "aside-load",
		MaxConns:           max(maxConns, 1),
		MaxConnWaitTimeout: timeout,
		// Well below the gateway's keep-alive (30 s): with no resend, a
		// request must not go out over a connection the server is closing
		// for idleness.
		MaxIdleConnDuration:       maxIdle,
		MaxIdemponentCallAttempts: 1,
		RetryIfErr:                func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		ReadTimeout:               timeout,
		WriteTimeout:              timeout,
		DialTimeout: func(addr string, t time.Duration) (net.Conn, error) {
			conn, err := fasthttp.DialTimeout(addr, t)
			if err != nil {
				return nil, err
			}
			c.dials.Add(1)
			mc := &markedConn{Conn: conn}
			mc.laddr = connAddr{Addr: conn.LocalAddr(), conn: mc}
			mc.fresh.Store(true)
			return mc, nil
		},
	}
	return c, nil
}

// Base is the base URL without a trailing slash.
func (c *Client) Base() string { return c.base }

// URL is base + path (path and query, escaped already).
func (c *Client) URL(path string) []byte { return []byte(c.base + path) }

// Dials is the number of connections opened so far.
func (c *Client) Dials() int64 { return c.dials.Load() }

// Open opens n connections before the load: rounds of n concurrent GETs of
// path until n are open or the deadline passes (a request that ends before
// another starts hands its connection on, so a round against a quick server
// may open fewer). Idle connections are reused oldest first (fasthttp's FIFO
// pool), so at a steady rate they all stay open; none is opened later
// unless more requests are in flight than n.
func (c *Client) Open(n int, path string, deadline time.Time) int64 {
	url := c.URL(path)
	for c.Dials() < int64(n) && time.Now().Before(deadline) {
		// Every request of a round waits for the others to be ready, so they
		// are in flight together and each needs a connection of its own: n of
		// them, as those a round left open take the first requests of the next.
		var ready, wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			ready.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ready.Done()
				<-start
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURIBytes(url)
				// Opened here, not by the load: its first request is not a new connection.
				_, _ = c.do(req, resp, time.Until(deadline))
			}()
		}
		ready.Wait()
		close(start)
		wg.Wait()
	}
	return c.Dials()
}

// CloseIdle closes the idle connections.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// do sends req once and reads resp within timeout; newConn is true when
// the request went over a connection it opened.
func (c *Client) do(req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) (newConn bool, err error) {
	err = c.hc.DoTimeout(req, resp, timeout)
	// fasthttp notes the connection's local address on the response before
	// sending: for a connection of ours that is a connAddr.
	if a, ok := resp.LocalAddr().(*connAddr); ok {
		newConn = a.conn.fresh.Swap(false)
	}
	return newConn, err
}

// markedConn is a connection that knows whether a request went over it yet.
type markedConn struct {
	net.Conn
	fresh atomic.Bool
	laddr connAddr
}

func (m *markedConn) LocalAddr() net.Addr { return &m.laddr }

type connAddr struct {
	net.Addr
	conn *markedConn
}

// ErrorCode says in a word why a request got no answer (a sample's tags.error).
func ErrorCode(err error) string {
	var netErr net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, fasthttp.ErrDialTimeout):
		return "dial_timeout"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no_free_conns"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection_reset"
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection_closed"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "dns"
	}
	return "error"
}
