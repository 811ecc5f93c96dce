package compute_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aside-lab/aside/core-go/internal/compute"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

type computeContract struct {
	IterationsPerComplexity int `json:"iterations_per_complexity"`
	ComplexityMin           int `json:"complexity_min"`
	ComplexityMax           int `json:"complexity_max"`
	Vectors                 []struct {
		Complexity int   `json:"complexity"`
		Checksum   int64 `json:"checksum"`
	} `json:"vectors"`
}

func TestChecksumVectors(t *testing.T) {
	var c computeContract
	testenv.LoadContract(t, "compute.json", &c)
	if c.IterationsPerComplexity != compute.IterationsPerComplexity ||
		c.ComplexityMin != compute.MinComplexity || c.ComplexityMax != compute.MaxComplexity {
		t.Fatalf("constants differ from compute.json: %+v", c)
	}
	if len(c.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range c.Vectors {
		got, err := compute.Checksum(context.Background(), v.Complexity)
		if err != nil || got != v.Checksum {
			t.Errorf("Checksum(%d) = %d, %v; want %d", v.Complexity, got, err, v.Checksum)
		}
	}
}

// The plain definition, for a complexity the contract does not list.
func TestChecksumMatchesDefinition(t *testing.T) {
	var want int64
	for i := int64(0); i < 3*compute.IterationsPerComplexity; i++ {
		want += (i*i)%1000 + 1
	}
	if got, _ := compute.Checksum(context.Background(), 3); got != want {
		t.Fatalf("Checksum(3) = %d, want %d", got, want)
	}
}

func TestChecksumRejectsOutOfRange(t *testing.T) {
	for _, n := range []int{0, -1, 1001} {
		if _, err := compute.Checksum(context.Background(), n); err == nil {
			t.Errorf("Checksum(%d) accepted", n)
		}
	}
}

func TestChecksumStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, err := compute.Checksum(ctx, compute.MaxComplexity)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("a cancelled checksum ran %s", d)
	}
}

func TestLimiterBoundsConcurrency(t *testing.T) {
	l := compute.NewLimiter(2, 20*time.Millisecond)
	r1, err1 := l.Acquire(context.Background())
	r2, err2 := l.Acquire(context.Background())
	if err1 != nil || err2 != nil || l.InUse() != 2 {
		t.Fatalf("two slots: %v %v in use %d", err1, err2, l.InUse())
	}
	start := time.Now()
	if _, err := l.Acquire(context.Background()); !errors.Is(err, compute.ErrBusy) {
		t.Fatalf("third acquire: %v, want ErrBusy", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond || d > time.Second {
		t.Fatalf("third acquire gave up after %s, want about the 20ms wait", d)
	}
	r1()
	r3, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	r2()
	r3()
	if l.InUse() != 0 {
		t.Fatalf("in use after releases: %d", l.InUse())
	}
}

func TestLimiterWaiterGetsFreedSlot(t *testing.T) {
	l := compute.NewLimiter(1, 5*time.Second)
	release, _ := l.Acquire(context.Background())
	got := make(chan error, 1)
	go func() {
		r, err := l.Acquire(context.Background())
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter never got the slot")
	}
}

func TestLimiterWithoutWaitFailsAtOnce(t *testing.T) {
	l := compute.NewLimiter(1, 0)
	release, _ := l.Acquire(context.Background())
	defer release()
	if _, err := l.Acquire(context.Background()); !errors.Is(err, compute.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
}

var sink int64

func benchmarkChecksum(b *testing.B, n int) {
	for b.Loop() {
		s, _ := compute.Checksum(context.Background(), n)
		sink = s
	}
}

func BenchmarkChecksum50(b *testing.B)   { benchmarkChecksum(b, 50) }
func BenchmarkChecksum1000(b *testing.B) { benchmarkChecksum(b, 1000) }
