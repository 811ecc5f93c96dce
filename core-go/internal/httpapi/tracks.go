package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aside-lab/aside/core-go/internal/compute"
	"github.com/aside-lab/aside/core-go/internal/tracks"
)

// TrackReader reads one track (store.Store).
type TrackReader interface {
	Track(ctx context.Context, id int64) (tracks.Track, error)
}

// trackDeps are what the simplification handler needs. Its limiter is its
// own (CORE_SIMPLIFY_MAX_CONCURRENCY), not /compute's: a miss of an
// anonymous ?simplify= never waits behind token-gated compute, nor the
// reverse, and past its bound it is answered 503 at once.
type trackDeps struct {
	tracks   TrackReader
	limiter  *compute.Limiter
	rejected prometheus.Counter
	duration prometheus.Observer
	points   *prometheus.HistogramVec
}

// simplifyTrack answers GET /internal/v1/tracks/:id/simplified?tolerance=T,
// the gateway's call on a miss of GET /api/v1/tracks/<id>?simplify=T: the
// track with its path simplified by Douglas-Peucker, as the API shows it.
func simplifyTrack(d trackDeps) handlerFunc {
	return func(c *gin.Context) error {
		req, err := parseSimplify(c)
		if err != nil {
			return err
		}
		// Read before taking a CPU slot: a slot is not held through a database wait.
		track, err := d.tracks.Track(c.Request.Context(), req.id)
		if err != nil {
			return err
		}
		release, err := acquireSlot(c.Request.Context(), d.limiter, d.rejected, "simplification")
		if err != nil {
			return err
		}
		defer release()
		start := time.Now()
		body, before, after, err := tracks.Simplified(track, req.canonical, req.tolerance)
		if err != nil {
			return err // a stored path the seeder did not write: 500, logged
		}
		d.duration.Observe(time.Since(start).Seconds())
		d.points.WithLabelValues("before").Observe(float64(before))
		d.points.WithLabelValues("after").Observe(float64(after))
		c.Data(http.StatusOK, "application/json; charset=utf-8", body)
		return nil
	}
}
