package popularity

import (
	"math"
	"math/rand/v2"
	"testing"
)

// chiSquare is Pearson's statistic of counts against the chances p(r) over n draws.
func chiSquare(counts []int, n int, p func(r int) float64) float64 {
	stat := 0.0
	for r, c := range counts {
		want := float64(n) * p(r)
		stat += (float64(c) - want) * (float64(c) - want) / want
	}
	return stat
}

// critical is the chi-square value a fit exceeds by chance with probability
// 0.001 at df degrees of freedom (Wilson-Hilferty's approximation, z = 3.09).
func critical(df int) float64 {
	k := float64(df)
	return k * math.Pow(1-2/(9*k)+3.09*math.Sqrt(2/(9*k)), 3)
}

func draw(rk Ranker, n int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 1))
	counts := make([]int, rk.N())
	for range n {
		counts[rk.Rank(rng.Float64())]++
	}
	return counts
}

// zipfLaw is rank r's chance (r from 0) under Zipf's law with exponent alpha
// over n ranks, (r + 1)^-alpha over the sum of k^-alpha for k = 1..n: computed
// here from the law itself, not read from the sampler under test.
func zipfLaw(n int, alpha float64) func(r int) float64 {
	sum := 0.0
	for k := n; k >= 1; k-- { // smallest terms first: less rounding
		sum += math.Pow(float64(k), -alpha)
	}
	return func(r int) float64 { return math.Pow(float64(r+1), -alpha) / sum }
}

// fromWeights is a sampler drawing rank r with a chance proportional to
// weight(r): the shape of a sampler built with a mistake.
func fromWeights(n int, weight func(r int) float64) *Zipf {
	cdf := make([]float64, n)
	total := 0.0
	for r := range n {
		total += weight(r)
		cdf[r] = total
	}
	for r := range cdf {
		cdf[r] /= total
	}
	cdf[n-1] = 1
	return &Zipf{cdf: cdf}
}

func TestZipfDrawsFitTheLawAndMistakenSamplersDoNot(t *testing.T) {
	const keys, n = 1000, 1_000_000
	for _, alpha := range []float64{0.6, 0.99, 1.3} {
		law := zipfLaw(keys, alpha)
		z, err := NewZipf(keys, alpha)
		if err != nil {
			t.Fatal(err)
		}
		if stat, limit := chiSquare(draw(z, n, 7), n, law), critical(keys-1); stat > limit {
			t.Errorf("alpha %g: chi-square %.0f above %.0f: the draws do not fit the law", alpha, stat, limit)
		}
		mistaken := map[string]*Zipf{
			"the exponent off by 0.05": fromWeights(keys, func(r int) float64 {
				return math.Pow(float64(r+1), -(alpha + 0.05))
			}),
			// r^-alpha with r from 0, its division by zero patched: ranks 0 and 1 alike.
			"ranks counted from 0": fromWeights(keys, func(r int) float64 {
				return math.Pow(float64(max(r, 1)), -alpha)
			}),
		}
		for name, wrong := range mistaken {
			if stat, limit := chiSquare(draw(wrong, n, 7), n, law), critical(keys-1); stat <= limit {
				t.Errorf("alpha %g, a sampler with %s: chi-square %.0f within %.0f", alpha, name, stat, limit)
			}
		}
	}
}

func TestZipfDrawsFitTheirExponentAndNotAnother(t *testing.T) {
	const keys, n = 1000, 1_000_000
	for _, alpha := range []float64{0.6, 0.99, 1.3} {
		z, err := NewZipf(keys, alpha)
		if err != nil {
			t.Fatal(err)
		}
		counts := draw(z, n, 7)
		if stat, limit := chiSquare(counts, n, z.P), critical(keys-1); stat > limit {
			t.Errorf("alpha %g: chi-square %.0f above %.0f: the draws do not fit", alpha, stat, limit)
		}
		// The same draws judged against a neighbouring exponent must not fit:
		// the check can fail.
		other, _ := NewZipf(keys, alpha+0.05)
		if stat, limit := chiSquare(counts, n, other.P), critical(keys-1); stat <= limit {
			t.Errorf("alpha %g judged as %g: chi-square %.0f within %.0f", alpha, alpha+0.05, stat, limit)
		}
	}
}

func TestUniformDrawsFit(t *testing.T) {
	const keys, n = 500, 500_000
	u, err := NewUniform(keys)
	if err != nil {
		t.Fatal(err)
	}
	counts := draw(u, n, 3)
	if stat, limit := chiSquare(counts, n, func(int) float64 { return 1.0 / keys }), critical(keys-1); stat > limit {
		t.Errorf("chi-square %.0f above %.0f", stat, limit)
	}
}

func TestRanksStayInRangeAtTheEdges(t *testing.T) {
	z, _ := NewZipf(10, 0.99)
	u, _ := NewUniform(10)
	for _, rk := range []Ranker{z, u} {
		if rk.Rank(0) != 0 || rk.Rank(math.Nextafter(1, 0)) != 9 {
			t.Errorf("%T: ranks %d and %d at the edges", rk, rk.Rank(0), rk.Rank(math.Nextafter(1, 0)))
		}
	}
}

func TestBadShapesAreRefused(t *testing.T) {
	if _, err := NewZipf(10, 0); err == nil {
		t.Error("alpha 0 accepted")
	}
	if _, err := NewZipf(10, math.NaN()); err == nil {
		t.Error("alpha NaN accepted")
	}
	if _, err := NewZipf(0, 1); err == nil {
		t.Error("an empty key space accepted")
	}
	if _, err := NewUniform(0); err == nil {
		t.Error("an empty key space accepted")
	}
}

func TestShuffledIsASeededPermutation(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	one, again, other := Shuffled(keys, 42), Shuffled(keys, 42), Shuffled(keys, 43)
	seen := map[string]bool{}
	for i := range one {
		seen[one[i]] = true
		if one[i] != again[i] {
			t.Fatalf("the same seed gave %v and %v", one, again)
		}
	}
	if len(seen) != len(keys) || keys[0] != "a" {
		t.Fatalf("not a permutation of an unchanged input: %v", one)
	}
	same := true
	for i := range one {
		same = same && one[i] == other[i]
	}
	if same {
		t.Errorf("seeds 42 and 43 gave the same order %v", one)
	}
}
