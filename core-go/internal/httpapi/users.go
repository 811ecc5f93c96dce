package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/userjson"
)

// UserWriter is what the user handlers need from the database.
type UserWriter interface {
	CreateUser(ctx context.Context, username, email string) (store.Written, error)
	CreateUserOnce(ctx context.Context, key string, requestHash []byte, username, email string) (store.Once, error)
	UpdateUser(ctx context.Context, id int64, upd store.Update) (store.Written, error)
	DeleteUser(ctx context.Context, id int64) (store.Written, error)
}

// Invalidator drops stale cache keys (and their leases) after a write.
type Invalidator interface {
	Invalidate(ctx context.Context, keys []string) error
}

// Outbox settles the invalidation a write owes (package outbox): Forget once
// the write's own DEL succeeded, Retry when it failed.
type Outbox interface {
	Forget(id int64)
	Retry(id int64)
}

// writeDeps are what every write handler needs.
type writeDeps struct {
	users       UserWriter
	invalidator Invalidator
	outbox      Outbox
	log         *slog.Logger
	// uncertain is told about writes whose outcome is unknown.
	uncertain func()
}

func createUser(d writeDeps) handlerFunc {
	return func(c *gin.Context) error {
		req, err := parseCreate(c)
		if err != nil {
			return err
		}
		if req.hasKey {
			return d.createOnce(c, req)
		}
		u, err := d.users.CreateUser(writeContext(c), req.username, req.email)
		if err != nil {
			// The new id is unknown; only the count can be dropped.
			return d.failed(c, err, cache.CountKey(req.email))
		}
		d.invalidate(c, u.Outbox, cache.StaleAfterCreate(cache.UserRef{ID: u.ID, Email: u.Email}))
		sendCreated(c, u.User)
		return nil
	}
}

// createOnce is a create under an Idempotency-Key: the first request with a
// key inserts and keeps the created row under it; a retry with the same body
// gets that row rendered again, the same bytes (Idempotent-Replayed: true),
// and writes nothing.
func (d writeDeps) createOnce(c *gin.Context, req createRequest) error {
	once, err := d.users.CreateUserOnce(writeContext(c), req.key, createRequestHash(req.username, req.email),
		req.username, req.email)
	if err != nil {
		return d.failed(c, err, cache.CountKey(req.email))
	}
	if once.Replayed {
		c.Header("Idempotent-Replayed", "true")
	}
	// A replay drops the first request's keys again (its Outbox is 0): that
	// request dropped them, unless it died between its commit and its DEL (a
	// killed core), and a client retries exactly then. A DEL is always safe:
	// one more miss.
	d.invalidate(c, once.Outbox, cache.StaleAfterCreate(cache.UserRef{ID: once.ID, Email: once.Email}))
	sendCreated(c, once.User)
	return nil
}

// sendCreated answers a create: 201, the user, and its Location.
func sendCreated(c *gin.Context, u store.User) {
	c.Header("Location", "/api/v1/users/"+strconv.FormatInt(u.ID, 10))
	c.JSON(http.StatusCreated, userjson.From(u))
}

func updateUser(d writeDeps) handlerFunc {
	return func(c *gin.Context) error {
		req, err := parseUpdate(c)
		if err != nil {
			return err
		}
		u, err := d.users.UpdateUser(writeContext(c), req.id, req.upd)
		if err != nil {
			// The old email is unknown here; if this write did land, its
			// outbox row settles count:<old email> after the grace period.
			known := []string{cache.UserKey(req.id)}
			if req.upd.Email != nil {
				known = append(known, cache.CountKey(*req.upd.Email))
			}
			return d.failed(c, err, known...)
		}
		d.invalidate(c, u.Outbox, cache.StaleAfterUpdate(
			cache.UserRef{ID: u.ID, Email: u.OldEmail}, cache.UserRef{ID: u.ID, Email: u.Email}))
		c.JSON(http.StatusOK, userjson.From(u.User))
		return nil
	}
}

func deleteUser(d writeDeps) handlerFunc {
	return func(c *gin.Context) error {
		id, err := parsePathID(c)
		if err != nil {
			return err
		}
		u, err := d.users.DeleteUser(writeContext(c), id)
		if err != nil {
			return d.failed(c, err, cache.UserKey(id))
		}
		d.invalidate(c, u.Outbox, cache.StaleAfterDelete(cache.UserRef{ID: u.ID, Email: u.Email}))
		c.Status(http.StatusNoContent)
		return nil
	}
}

// writeContext keeps a write going when the client hangs up: once the
// statement is sent, the core must learn its outcome to invalidate. The
// store bounds it with CORE_DB_TIMEOUT_MS.
func writeContext(c *gin.Context) context.Context {
	return context.WithoutCancel(c.Request.Context())
}

// invalidate drops the stale keys and settles the write's outbox row
// (outbox 0: a replay, whose row was settled by the first request). A failure
// is logged, counted (by the invalidator) and told to the caller in a header;
// the write stands and the outbox sends the DEL again until Redis takes it.
func (d writeDeps) invalidate(c *gin.Context, outbox int64, keys []string) {
	if err := d.invalidator.Invalidate(context.WithoutCancel(c.Request.Context()), keys); err != nil {
		d.outbox.Retry(outbox)
		d.log.Error("cache invalidation failed; the outbox retries it until Redis takes it",
			"keys", keys, "outbox", outbox, "err", err)
		c.Header("X-Cache-Invalidation", "failed")
		return
	}
	d.outbox.Forget(outbox)
}

// failed is what a failed write owes before its answer, which it returns
// for handle to map. When the write may have landed unseen (its COMMIT got
// no reply), it is counted and knownKeys, the keys it would have made stale
// that are known without its result, are dropped.
func (d writeDeps) failed(c *gin.Context, err error, knownKeys ...string) error {
	var unavailable *store.UnavailableError
	if !errors.As(err, &unavailable) {
		return err
	}
	if unavailable.MaybeApplied {
		d.uncertain()
		d.log.Warn("write outcome unknown; dropping the keys it may have made stale", "err", err)
		if ierr := d.invalidator.Invalidate(context.WithoutCancel(c.Request.Context()), knownKeys); ierr != nil {
			d.log.Error("cache invalidation after an uncertain write failed", "keys", knownKeys, "err", ierr)
		}
	} else {
		d.log.Warn("database unavailable", "err", err)
	}
	return err
}
