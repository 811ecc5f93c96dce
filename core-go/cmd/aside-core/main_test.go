package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aside-lab/aside/core-go/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// coreBinary builds the real aside-core once per test run.
func coreBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aside-core-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "aside-core")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type runningCore struct {
	cmd    *exec.Cmd
	addr   string
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan error // cmd.Wait's result
}

var listeningLine = regexp.MustCompile(`msg="aside-core listening" addr=(\S+)`)

func baseEnv(extra ...string) []string {
	e := append(os.Environ(),
		"DATABASE_URL="+env.DatabaseURL,
		"REDIS_URL="+env.RedisURL,
		"CORE_LISTEN_ADDR=127.0.0.1:0",
		"ASIDE_PROFILE=lab",
	)
	return append(e, extra...)
}

// startCore runs the binary on a free port and waits for its address. It
// is killed at the end of the test if it is still running.
func startCore(t *testing.T, extraEnv ...string) *runningCore {
	t.Helper()
	c := &runningCore{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	c.cmd = exec.Command(coreBinary(t))
	c.cmd.Env = baseEnv(extraEnv...)
	pr, pw := io.Pipe()
	c.cmd.Stdout = io.MultiWriter(c.stdout, pw)
	c.cmd.Stderr = c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.done <- c.cmd.Wait()
		_ = pw.Close()
	}()
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				addrCh <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case c.addr = <-addrCh:
	case <-time.After(10 * time.Second):
		t.Fatalf("the core did not report its address; stdout %q stderr %q", c.stdout, c.stderr)
	}
	return c
}

func (c *runningCore) url(path string) string { return "http://" + c.addr + path }

func (c *runningCore) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("the core did not exit within %s; stdout %q", within, c.stdout)
		return -1
	}
}

// computeSlotsInUse reads the gauge from /metrics.
func computeSlotsInUse(url string) (int, error) {
	n, err := metricValue(url, "aside_core_compute_slots_in_use")
	return int(n), err
}

// metricValue reads one unlabelled sample from the /metrics page at url.
func metricValue(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v float64
	for _, line := range strings.Split(string(body), "\n") {
		if _, err := fmt.Sscanf(line, name+" %g", &v); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s not found", name)
}

// pollUntil calls f until it returns true or the deadline passes.
func pollUntil(t *testing.T, within time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type computeOutcome struct {
	status   int
	checksum int64
	err      error
	at       time.Time
}

// startComputes sends n concurrent complexity-1000 requests whose answers
// the core holds for holdMs (ASIDE_TEST_HOOKS=1), so that they stay in flight
// for a known time however fast the machine computes.
func startComputes(c *runningCore, n, holdMs int) chan computeOutcome {
	out := make(chan computeOutcome, n)
	client := &http.Client{Timeout: 30 * time.Second}
	for i := 0; i < n; i++ {
		go func() {
			req, err := http.NewRequest(http.MethodPost, c.url("/api/v1/compute"), strings.NewReader(`{"complexity":1000}`))
			if err != nil {
				out <- computeOutcome{err: err, at: time.Now()}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Test-Delay-Ms", strconv.Itoa(holdMs))
			resp, err := client.Do(req)
			if err != nil {
				out <- computeOutcome{err: err, at: time.Now()}
				return
			}
			defer resp.Body.Close()
			var body struct {
				Checksum int64 `json:"checksum"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			out <- computeOutcome{status: resp.StatusCode, checksum: body.Checksum, err: err, at: time.Now()}
		}()
	}
	return out
}

// SIGTERM while requests run: they finish with 200, the listener is closed
// at once (new connections refused), and the process exits 0.
func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	// Three requests held for a second each stay in flight past the signal.
	c := startCore(t, "ASIDE_TEST_HOOKS=1", "CORE_COMPUTE_MAX_CONCURRENCY=3", "CORE_SHUTDOWN_TIMEOUT=30s")
	outcomes := startComputes(c, 3, 1000)
	pollUntil(t, 10*time.Second, "three computes in flight", func() bool {
		n, err := computeSlotsInUse(c.url("/metrics"))
		return err == nil && n == 3
	})
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var refusedAt time.Time
	pollUntil(t, 5*time.Second, "new connections to be refused", func() bool {
		conn, err := net.DialTimeout("tcp", c.addr, 200*time.Millisecond)
		if err != nil {
			refusedAt = time.Now()
			return errors.Is(err, syscall.ECONNREFUSED)
		}
		_ = conn.Close()
		return false
	})
	var lastDone time.Time
	for i := 0; i < 3; i++ {
		o := <-outcomes
		if o.err != nil || o.status != http.StatusOK || o.checksum != 46250000000 {
			t.Fatalf("in-flight request: status %d checksum %d err %v", o.status, o.checksum, o.err)
		}
		if o.at.After(lastDone) {
			lastDone = o.at
		}
	}
	if !refusedAt.Before(lastDone) {
		t.Fatalf("connections were refused only at %s, after the drain ended at %s", refusedAt, lastDone)
	}
	if code := c.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d; stderr %q", code, c.stderr)
	}
	if out := c.stdout.String(); !strings.Contains(out, "shutting down") || !strings.Contains(out, "msg=stopped") {
		t.Fatalf("stdout %q", out)
	}
}

// A drain longer than CORE_SHUTDOWN_TIMEOUT ends the process with 1 and a
// one-line reason.
func TestShutdownTimeoutIsEnforced(t *testing.T) {
	// Two computes whose answers are held for 3 s: the drain cannot end
	// within the 100 ms timeout, however fast the machine computes.
	c := startCore(t, "ASIDE_TEST_HOOKS=1", "CORE_COMPUTE_MAX_CONCURRENCY=2", "CORE_SHUTDOWN_TIMEOUT=100ms")
	outcomes := startComputes(c, 2, 3000)
	pollUntil(t, 10*time.Second, "two computes in flight", func() bool {
		n, err := computeSlotsInUse(c.url("/metrics"))
		return err == nil && n == 2
	})
	start := time.Now()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code := c.wait(t, 5*time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr %q", code, c.stderr.String())
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s to give up with a 100ms timeout", d)
	}
	stderr := c.stderr.String()
	if !strings.Contains(stderr, "CORE_SHUTDOWN_TIMEOUT") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("stderr %q", stderr)
	}
	for i := 0; i < 2; i++ {
		<-outcomes // cut off; their errors do not matter
	}
}

func TestConfigErrorIsOneLineNamingTheVariable(t *testing.T) {
	bin := coreBinary(t)
	for _, kv := range []string{"CORE_DB_POOL_MAX=lots", "ASIDE_PROFILE=staging", "REDIS_URL=http://x", "CORE_SHUTDOWN_TIMEOUT=never"} {
		name := strings.SplitN(kv, "=", 2)[0]
		cmd := exec.Command(bin)
		cmd.Env = baseEnv(kv)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
			t.Fatalf("%s: err %v, want exit code 1", kv, err)
		}
		line := stderr.String()
		if !strings.HasPrefix(line, "aside-core: "+name+": ") || strings.Count(line, "\n") != 1 {
			t.Fatalf("%s: stderr %q, want one line naming %s", kv, line, name)
		}
	}
}

func TestListenErrorNamesTheVariable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(coreBinary(t))
	cmd.Env = baseEnv("CORE_LISTEN_ADDR=" + ln.Addr().String())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "aside-core: CORE_LISTEN_ADDR: cannot listen on "+ln.Addr().String()) {
		t.Fatalf("err %v, output %q", err, out)
	}
}

func TestHealthcheckSubcommand(t *testing.T) {
	c := startCore(t)
	bin := coreBinary(t)
	if out, err := exec.Command(bin, "healthcheck", c.url("/healthz")).CombinedOutput(); err != nil {
		t.Fatalf("healthcheck of a live core: %v %s", err, out)
	}
	closed := "http://" + testenv.ClosedAddr(t) + "/healthz"
	if out, err := exec.Command(bin, "healthcheck", closed).CombinedOutput(); err == nil {
		t.Fatalf("healthcheck of a closed port succeeded: %s", out)
	}
	if out, err := exec.Command(bin, "healthcheck", c.url("/nope")).CombinedOutput(); err == nil || !strings.Contains(string(out), "404") {
		t.Fatalf("healthcheck of a 404: %v %s", err, out)
	}
	if out, err := exec.Command(bin, "--bogus").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown argument") {
		t.Fatalf("unknown argument: %v %s", err, out)
	}
}

// run() in-process: it serves until its context ends, then returns nil.
func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vars := map[string]string{
		"ASIDE_PROFILE": "lab", "DATABASE_URL": env.DatabaseURL, "REDIS_URL": env.RedisURL, "CORE_LISTEN_ADDR": "127.0.0.1:0",
	}
	pr, pw := io.Pipe()
	result := make(chan error, 1)
	go func() {
		result <- run(ctx, []string{"aside-core"}, func(k string) string { return vars[k] }, pw)
		_ = pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var addr string
	for addr == "" && sc.Scan() {
		if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if addr == "" {
		t.Fatalf("no address: %v", <-result)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz %d with PostgreSQL and Redis up", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunRejectsBadConfigInProcess(t *testing.T) {
	err := run(context.Background(), []string{"aside-core"},
		func(k string) string {
			return map[string]string{"ASIDE_PROFILE": "lab", "CORE_REDIS_TIMEOUT_MS": "0"}[k]
		}, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "CORE_REDIS_TIMEOUT_MS: ") {
		t.Fatalf("err = %v", err)
	}
}

var metricsLine = regexp.MustCompile(`msg="aside-core metrics listening" addr=(\S+)`)

// The production profile with the real binary: /metrics only on its own
// listener, and an unexpected database error (here: the users table is not
// on the search_path) is a bare 500 internal with the detail in the log only.
func TestProductionProfileHidesMetricsAndInternals(t *testing.T) {
	dbURL, err := url.Parse(env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	q := dbURL.Query()
	q.Set("search_path", "no_such_schema")
	dbURL.RawQuery = q.Encode()
	c := startCore(t, "ASIDE_PROFILE=production", "CORE_METRICS_ADDR=127.0.0.1:0", "DATABASE_URL="+dbURL.String(),
		"CORE_TOKEN="+testCoreToken)
	m := metricsLine.FindStringSubmatch(c.stdout.String())
	if m == nil {
		t.Fatalf("no metrics listener logged: %q", c.stdout)
	}

	resp, err := http.Get(c.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":"not_found"`) {
		t.Fatalf("public /metrics: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `aside_core_info{profile="production"} 1`) {
		t.Fatalf("metrics listener: %d %s", resp.StatusCode, body)
	}

	status, body := postUserAs(t, c, `{"username":"ada","email":"ada@example.com"}`, "Bearer "+testCoreToken)
	if status != http.StatusInternalServerError || string(body) != `{"error":{"code":"internal","message":"internal error"}}` {
		t.Fatalf("unexpected database error: %d %s", status, body)
	}
	pollUntil(t, 5*time.Second, "the error in the log", func() bool {
		return strings.Contains(c.stdout.String(), "42P01")
	})
}

func TestMetricsListenErrorNamesTheVariable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(coreBinary(t))
	cmd.Env = baseEnv("CORE_METRICS_ADDR=" + ln.Addr().String())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "aside-core: CORE_METRICS_ADDR: cannot listen on "+ln.Addr().String()) {
		t.Fatalf("err %v, output %q", err, out)
	}
}

// The production gateways' and cores' shared credential in tests: not a secret.
const testCoreToken = "test-core-token-0123456789abcdef"

// postUserAs sends POST /api/v1/users with the given Authorization header
// (none when empty) and returns the status and body.
func postUserAs(t *testing.T, c *runningCore, body, authorization string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url("/api/v1/users"), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, answer
}

// The real binary in production: a write without CORE_TOKEN, or with a
// wrong one, is 401 unauthorized and writes nothing; with it, 201.
func TestProductionCoreNeedsCoreTokenForWrites(t *testing.T) {
	env.Reset(t)
	c := startCore(t, "ASIDE_PROFILE=production", "CORE_METRICS_ADDR=127.0.0.1:0", "CORE_TOKEN="+testCoreToken)
	const ada = `{"username":"ada","email":"ada@example.com"}`
	before := env.UserCount(t)
	for _, auth := range []string{"", "Bearer wrong-token-0123456789abcdef"} {
		status, body := postUserAs(t, c, ada, auth)
		var answer struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(body, &answer); err != nil || status != http.StatusUnauthorized ||
			answer.Error.Code != "unauthorized" || answer.Error.Message == "" {
			t.Fatalf("POST with Authorization %q: %d %s", auth, status, body)
		}
	}
	if after := env.UserCount(t); after != before {
		t.Fatalf("refused writes changed the users table: %d rows -> %d", before, after)
	}
	if status, body := postUserAs(t, c, ada, "Bearer "+testCoreToken); status != http.StatusCreated {
		t.Fatalf("POST with CORE_TOKEN: %d %s", status, body)
	}
	if after := env.UserCount(t); after != before+1 {
		t.Fatalf("%d rows after one accepted write, want %d", after, before+1)
	}
	if strings.Contains(c.stdout.String()+c.stderr.String(), testCoreToken) {
		t.Fatal("the core logged its token")
	}
}

// ASIDE_PROFILE unset is production: the real binary refuses to start
// without DATABASE_URL, in one line naming it.
func TestUnsetProfileIsProduction(t *testing.T) {
	var e []string
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "ASIDE_PROFILE", "DATABASE_URL", "REDIS_URL", "CORE_TOKEN":
			continue
		}
		e = append(e, kv)
	}
	// Bounded: a core that took the lab profile would start and serve.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, coreBinary(t))
	cmd.Env = append(e, "CORE_LISTEN_ADDR=127.0.0.1:0", "CORE_METRICS_ADDR=127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 ||
		stderr.String() != "aside-core: DATABASE_URL: must be set when ASIDE_PROFILE=production\n" {
		t.Fatalf("err %v stderr %q, want exit 1 naming DATABASE_URL", err, stderr.String())
	}
}
