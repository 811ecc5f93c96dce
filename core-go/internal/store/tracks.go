package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aside-lab/aside/core-go/internal/tracks"
)

// ErrNoTrack: no track with that id (404).
var ErrNoTrack = errors.New("no such track")

// trackSQL reads the path as the stored JSON text (json::text costs no
// conversion), which tracks.ParsePath decodes.
const trackSQL = `SELECT id, name, distance_m, path::text FROM tracks WHERE id = $1`

// Track reads one track (the seeder writes them; the core only reads).
func (s *Store) Track(ctx context.Context, id int64) (tracks.Track, error) {
	var t tracks.Track
	err := s.withConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return conn.QueryRow(ctx, trackSQL, id).Scan(&t.ID, &t.Name, &t.DistanceM, &t.Path)
	})
	if errors.Is(err, ErrNotFound) {
		return t, ErrNoTrack
	}
	return t, err
}
