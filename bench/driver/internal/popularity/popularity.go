// Package popularity is how often each key of a key space is asked for: a
// Ranker turns a uniform number into a rank (0 the most popular key), and
// Shuffled lays the ranks over the keys in an order set by a seed, so that
// popularity does not follow the key file's order.
//
// Zipf is drawn by inverse transform over its cumulative table: exact for
// every exponent (math/rand's Zipf wants one above 1; production caches are
// often fitted below it), and one binary search a request.
package popularity

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Ranker maps u, uniform in [0, 1), to a rank in [0, N()).
type Ranker interface {
	Rank(u float64) int
	N() int
}

// Uniform gives every rank the same chance.
type Uniform struct{ n int }

// NewUniform is uniform over n ranks.
func NewUniform(n int) (Uniform, error) {
	if n < 1 {
		return Uniform{}, fmt.Errorf("a key space needs at least one key, got %d", n)
	}
	return Uniform{n: n}, nil
}

// Rank implements Ranker.
func (p Uniform) Rank(u float64) int { return min(int(u*float64(p.n)), p.n-1) }

// N implements Ranker.
func (p Uniform) N() int { return p.n }

// Zipf gives rank r (from 0) a chance proportional to 1 / (r + 1)^alpha.
type Zipf struct {
	alpha float64
	cdf   []float64 // cdf[r]: the chance of a rank <= r; the last is 1
}

// NewZipf is Zipf with exponent alpha > 0 over n ranks.
func NewZipf(n int, alpha float64) (*Zipf, error) {
	if n < 1 {
		return nil, fmt.Errorf("a key space needs at least one key, got %d", n)
	}
	if !(alpha > 0) || math.IsInf(alpha, 0) {
		return nil, fmt.Errorf("zipf's exponent must be a number above 0, got %g", alpha)
	}
	cdf := make([]float64, n)
	total := 0.0
	for r := range cdf {
		total += math.Pow(float64(r+1), -alpha)
		cdf[r] = total
	}
	for r := range cdf {
		cdf[r] /= total
	}
	cdf[n-1] = 1
	return &Zipf{alpha: alpha, cdf: cdf}, nil
}

// Rank implements Ranker: the first rank whose cumulative chance exceeds u.
func (z *Zipf) Rank(u float64) int {
	return min(sort.Search(len(z.cdf), func(r int) bool { return z.cdf[r] > u }), len(z.cdf)-1)
}

// N implements Ranker.
func (z *Zipf) N() int { return len(z.cdf) }

// P is rank r's chance.
func (z *Zipf) P(r int) float64 {
	if r == 0 {
		return z.cdf[0]
	}
	return z.cdf[r] - z.cdf[r-1]
}

// Shuffled is keys in an order set by seed: ranks map to keys through it.
// The same seed gives the same order; keys is not changed.
func Shuffled(keys []string, seed uint64) []string {
	out := append([]string(nil), keys...)
	rng := rand.New(rand.NewPCG(seed, 0x5eed_0f_4e75))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
