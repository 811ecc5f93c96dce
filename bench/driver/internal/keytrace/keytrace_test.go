package keytrace_test

import (
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"aside/bench/driver/internal/keytrace"
)

func parse(t *testing.T, text string) *keytrace.Trace {
	t.Helper()
	tr, err := keytrace.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// keys is the trace's lines as keys.
func keys(tr *keytrace.Trace) []string {
	out := make([]string, len(tr.Lines))
	for i, k := range tr.Lines {
		out[i] = tr.Keys[k]
	}
	return out
}

func TestParseTimedUntimedAndComments(t *testing.T) {
	tr := parse(t, "# made by hand\n\na@x\t0.5\r\nb@x\t1.25\n  \n# a comment\na@x\t1.25\n")
	if got := keys(tr); !reflect.DeepEqual(got, []string{"a@x", "b@x", "a@x"}) {
		t.Errorf("keys %v", got)
	}
	if !reflect.DeepEqual(tr.Keys, []string{"a@x", "b@x"}) || !tr.Timed() || !reflect.DeepEqual(tr.At, []float64{0.5, 1.25, 1.25}) {
		t.Errorf("distinct %v, at %v", tr.Keys, tr.At)
	}
	untimed := parse(t, "a@x\nb@x\n")
	if untimed.Timed() || len(untimed.Lines) != 2 {
		t.Errorf("untimed: %+v", untimed)
	}
	// One line without a timestamp: the whole trace goes at RATE.
	mixed := parse(t, "a@x\t0.1\nb@x\na@x\t0.3\n")
	if mixed.Timed() || !reflect.DeepEqual(keys(mixed), []string{"a@x", "b@x", "a@x"}) {
		t.Errorf("partly timed: %+v", mixed)
	}
}

func TestErrorsNameTheLine(t *testing.T) {
	cases := []struct{ text, want string }{
		{"a@x\t0.1\n\n#c\nb@x\tsoon\n", `TRACE: line 4: the timestamp must be seconds >= 0, got "soon"`},
		{"a@x\t-1\n", `TRACE: line 1: the timestamp must be seconds >= 0, got "-1"`},
		{"a@x\n\t0.5\n", "TRACE: line 2: no key before the TAB"},
		{"a@x\nb x\n", `TRACE: line 2: a key holds no blank, got "b x"`},
		{"a@x\t0.2\nb@x\t0.1\n", "TRACE: line 2: the timestamp 0.1 is below the line before's (0.2): a trace is in send order"},
		{"# nothing\n\n", "TRACE: holds no key"},
		{"a@x\t0\nb@x\t0\n", "TRACE: every timestamp is 0: a timed trace must span some time"},
	}
	for _, c := range cases {
		_, err := keytrace.Parse(strings.NewReader(c.text))
		var terr *keytrace.Error
		if !errors.As(err, &terr) || err.Error() != c.want {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
	_, err := keytrace.Read(filepath.Join(t.TempDir(), "none.trace"))
	if err == nil || !strings.HasPrefix(err.Error(), "TRACE: cannot read ") {
		t.Errorf("a missing file: %v", err)
	}
}

func TestReadsGzipByItsMagic(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"k.trace.gz", "k.trace"} {
		path := filepath.Join(dir, "zipped-"+name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		gz := gzip.NewWriter(f)
		gz.Write([]byte("# header\na@x\t0.1\nb@x\t0.2\n"))
		gz.Close()
		f.Close()
		tr, err := keytrace.Read(path)
		if err != nil || !reflect.DeepEqual(keys(tr), []string{"a@x", "b@x"}) || !tr.Timed() {
			t.Errorf("%s: %v %+v", name, err, tr)
		}
	}
	plain := filepath.Join(dir, "plain.trace")
	os.WriteFile(plain, []byte("c@x\n"), 0o644)
	if tr, err := keytrace.Read(plain); err != nil || keys(tr)[0] != "c@x" {
		t.Errorf("plain: %v", err)
	}
}

func TestReplayOrderWrapsAndShares(t *testing.T) {
	tr := parse(t, "a\nb\nc\na\nd\n")
	key := func(r *keytrace.Replay, i uint64) string { return tr.Keys[r.Key(i)] }
	one := tr.Replay(0, 1, 0, 1)
	var got []string
	for i := uint64(1); i <= 12; i++ {
		got = append(got, key(one, i))
	}
	if want := "a b c a d a b c a d a b"; strings.Join(got, " ") != want {
		t.Errorf("one shard asks %v, want %s", got, want)
	}
	if one.Passes(5) != 1 || one.Passes(6) != 2 || one.Passes(12) != 3 || one.Passes(0) != 0 {
		t.Errorf("passes %d %d %d", one.Passes(5), one.Passes(6), one.Passes(12))
	}
	// Two shards take every other line between them: together, the trace.
	s0, s1 := tr.Replay(0, 2, 0, 1), tr.Replay(1, 2, 0, 1)
	var both []string
	for i := uint64(1); i <= 5; i++ {
		both = append(both, key(s0, i), key(s1, i))
	}
	if want := "a b c a d a b c a d"; strings.Join(both, " ") != want {
		t.Errorf("two shards ask %v, want %s", both, want)
	}
}

func TestTimedReplayDueTimesAndCount(t *testing.T) {
	tr := parse(t, "a\t0.1\nb\t0.25\nc\t1.0\n")
	r := tr.Replay(0, 1, 0, 1)
	// A wrap starts again one period (the last timestamp, 1 s) later.
	want := []int64{100e6, 250e6, 1000e6, 1100e6, 1250e6, 2000e6, 2100e6}
	for i, w := range want {
		if got := r.At(uint64(i + 1)); got != w {
			t.Errorf("line %d due at %d ns, want %d", i+1, got, w)
		}
	}
	counts := map[time.Duration]uint64{50 * time.Millisecond: 0, 100 * time.Millisecond: 1, time.Second: 3, 1200 * time.Millisecond: 4, 2100 * time.Millisecond: 7}
	for d, n := range counts {
		if got := r.Count(d); got != n {
			t.Errorf("within %v: %d due, want %d", d, got, n)
		}
	}
	fast := tr.Replay(0, 1, 0, 2) // TRACE_SPEED 2: every gap halved
	if fast.At(2) != 125e6 || fast.At(4) != 550e6 || fast.Count(time.Second) != 6 {
		t.Errorf("speed 2: %d %d, %d within 1 s", fast.At(2), fast.At(4), fast.Count(time.Second))
	}
}

// SKIP: a step after a warm-up of SKIP iterations goes on from the line
// after the warm-up's last, its due times counted from that line's.
func TestReplayAfterAWarmUp(t *testing.T) {
	tr := parse(t, "a\t0.1\nb\t0.25\nc\t1.0\n")
	r := tr.Replay(0, 1, 2, 1) // the warm-up asked a and b (the last at 0.25 s)
	if tr.Keys[r.Key(1)] != "c" || tr.Keys[r.Key(2)] != "a" || r.At(1) != 750e6 || r.At(2) != 850e6 {
		t.Errorf("after a warm-up of 2: %s at %d, %s at %d", tr.Keys[r.Key(1)], r.At(1), tr.Keys[r.Key(2)], r.At(2))
	}
	if r.Count(time.Second) != 3 || r.Passes(1) != 1 || r.Passes(2) != 2 {
		t.Errorf("count %d, passes %d %d", r.Count(time.Second), r.Passes(1), r.Passes(2))
	}
	untimed := parse(t, "a\nb\nc\n").Replay(1, 2, 1, 1) // shard 1 of 2 skipped line 1
	if got := untimed.Key(1); got != 0 {
		t.Errorf("shard 1 after one iteration asks key %d, want a (line 3 = line 0 again)", got)
	}
}

func TestRecorderIsBoundedAndWritesBothForms(t *testing.T) {
	names := []string{"a@x", "b@x", "c@x"}
	rec := keytrace.NewRecorder(4)
	rec.Note(1, 2, 10e6)
	rec.Note(3, 0, 30e6) // iteration 2 was dropped: no line
	rec.Note(4, 1, 1500e6)
	rec.Note(5, 0, 50e6) // beyond the bound
	rec.Note(9, 0, 90e6)
	if rec.Lost() != 2 {
		t.Errorf("lost %d, want 2", rec.Lost())
	}
	dir := t.TempDir()
	for _, name := range []string{"keys.trace", "keys.trace.gz"} {
		path := filepath.Join(dir, name)
		lines, err := rec.Write(path, func(i int) string { return names[i] }, 0)
		if err != nil || lines != 3 {
			t.Fatalf("%s: %d lines, %v", name, lines, err)
		}
		raw, _ := os.ReadFile(path)
		if gz := raw[0] == 0x1f && raw[1] == 0x8b; gz != strings.HasSuffix(name, ".gz") {
			t.Errorf("%s: gzip %v", name, gz)
		}
		tr, err := keytrace.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(keys(tr), []string{"c@x", "a@x", "b@x"}) || !reflect.DeepEqual(tr.At, []float64{0.01, 0.03, 1.5}) {
			t.Errorf("%s: %v at %v", name, keys(tr), tr.At)
		}
	}
	plain, _ := os.ReadFile(filepath.Join(dir, "keys.trace"))
	if string(plain) != "c@x\t0.010000\na@x\t0.030000\nb@x\t1.500000\n" {
		t.Errorf("the file reads %q", plain)
	}
	if _, err := rec.Write(filepath.Join(dir, "none", "k.trace"), func(i int) string { return names[i] }, 0); err == nil ||
		!strings.HasPrefix(err.Error(), "KEY_TRACE_PATH: ") {
		t.Errorf("an unwritable path: %v", err)
	}
}
