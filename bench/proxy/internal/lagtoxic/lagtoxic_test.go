package lagtoxic

import (
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

func TestDelayStaysWithinItsJitter(t *testing.T) {
	toxic := &Latency{LatencyUs: 1000, JitterUs: 200}
	for range 1000 {
		d := toxic.Delay()
		if d < 800*time.Microsecond || d >= 1200*time.Microsecond {
			t.Fatalf("a delay of %v is outside 1000±200 µs", d)
		}
	}
	if d := (&Latency{LatencyUs: 100, JitterUs: 500}).Delay(); d < 0 {
		t.Fatalf("a delay of %v: a draw below zero must be no delay", d)
	}
}

func TestTheMeanLatenessFollowsTheWakeUps(t *testing.T) {
	toxic := &Latency{LatencyUs: 1000}
	for range 200 {
		toxic.Observe(100 * time.Microsecond)
	}
	if got := toxic.Lateness(); got < 90*time.Microsecond || got > 100*time.Microsecond {
		t.Fatalf("after 200 wake-ups 100 µs late the mean is %v", got)
	}
	now := time.Now()
	if got := toxic.Sleep(now.Add(time.Millisecond), now); got > 910*time.Microsecond {
		t.Fatalf("asked %v for a chunk due in 1 ms: the mean lateness is not taken off", got)
	}
}

func TestAStarvedWakeUpMovesTheMeanLittle(t *testing.T) {
	toxic := &Latency{LatencyUs: 500}
	for range 200 {
		toxic.Observe(20 * time.Millisecond) // no core for 20 ms
	}
	if got := toxic.Lateness(); got > maxLate {
		t.Fatalf("the mean is %v after starved wake-ups, above the cap %v", got, maxLate)
	}
	now := time.Now()
	if got := toxic.Sleep(now.Add(200*time.Microsecond), now); got < 100*time.Microsecond {
		t.Fatalf("asked %v for a chunk due in 200 µs: the correction took more than half", got)
	}
}

func TestAMeanThatSwallowsTheDelayDecays(t *testing.T) {
	toxic := &Latency{LatencyUs: 100}
	for range 200 {
		toxic.Observe(5 * time.Millisecond) // a starved burst, capped
	}
	start := toxic.Lateness()
	now := time.Now()
	for range 100 {
		toxic.Sleep(now.Add(100*time.Microsecond), now)
	}
	// It decays until the correction fits the time left again.
	if got := toxic.Lateness(); got >= 100*time.Microsecond {
		t.Fatalf("the mean stayed at %v (from %v) while every chunk left at once", got, start)
	}
}

// meanThroughPipe is the mean time a chunk takes through the toxic's pipe,
// from arrival to leaving, once the mean lateness has settled.
func meanThroughPipe(toxic *Latency) time.Duration {
	input := make(chan *stream.StreamChunk)
	output := make(chan *stream.StreamChunk)
	stub := toxics.NewToxicStub(input, output)
	done := make(chan struct{})
	go func() { toxic.Pipe(stub); close(done) }()
	const settle, measured = 50, 200
	var total time.Duration
	for i := range settle + measured {
		sent := time.Now()
		input <- &stream.StreamChunk{Data: []byte("x"), Timestamp: sent}
		<-output
		if i >= settle {
			total += time.Since(sent)
		}
	}
	close(input)
	<-done
	return total / measured
}

// The bounds are loose: the test shares its cores with whatever else runs; the
// sweep measures each hop's round trip against its setting.
func TestChunksLeaveAfterTheDelayAsked(t *testing.T) {
	toxic := &Latency{LatencyUs: 1000}
	if mean := meanThroughPipe(toxic); mean < 900*time.Microsecond || mean > 1300*time.Microsecond {
		t.Fatalf("chunks took %v on average through a 1000 µs toxic (mean lateness %v)", mean, toxic.Lateness())
	}
}

// A Go timer below a millisecond sleeps a whole one on an idle runtime: the
// same-zone figure (0.5 ms) would be applied as 1 ms.
func TestHalfAMillisecondIsNotAWholeOne(t *testing.T) {
	toxic := &Latency{LatencyUs: 500}
	if mean := meanThroughPipe(toxic); mean < 450*time.Microsecond || mean > 800*time.Microsecond {
		t.Fatalf("chunks took %v on average through a 500 µs toxic (mean lateness %v)", mean, toxic.Lateness())
	}
}
