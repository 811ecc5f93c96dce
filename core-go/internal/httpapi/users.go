package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/validate"
)

// UserWriter is what the user handlers need from the database.
type UserWriter interface {
	CreateUser(ctx context.Context, username, email string) (store.Written, error)
	CreateUserOnce(ctx context.Context, key string, requestHash []byte, username, email string,
		render func(store.User) store.Answer) (store.Once, error)
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

// userJSON is a user as the API shows it (contracts/cache.json user_json).
type userJSON struct {
	ID        int64  `json:"id"`
	Username  string `json:"username"`
	Email     string `json:"email"`
	CreatedAt string `json:"created_at"`
}

// createdAtLayout is RFC 3339 in UTC with exactly six fractional digits.
const createdAtLayout = "2006-01-02T15:04:05.000000Z"

func newUserJSON(u store.User) userJSON {
	return userJSON{ID: u.ID, Username: u.Username, Email: u.Email,
		CreatedAt: u.CreatedAt.UTC().Format(createdAtLayout)}
}

type userBody struct {
	Username json.RawMessage `json:"username"`
	Email    json.RawMessage `json:"email"`
}

var userFields = []string{"username", "email"}

// writeDeps are what every write handler needs.
type writeDeps struct {
	users       UserWriter
	invalidator Invalidator
	outbox      Outbox
	log         *slog.Logger
	// uncertain is told about writes whose outcome is unknown.
	uncertain func()
}

func createUser(d writeDeps) gin.HandlerFunc {
	return func(c *gin.Context) {
		key, hasKey, e := idempotencyKey(c.Request)
		if e != nil {
			abortWith(c, e)
			return
		}
		var body userBody
		if e := decodeObject(c, &body, userFields...); e != nil {
			abortWith(c, e)
			return
		}
		username, e := requiredUsername(body.Username)
		if e != nil {
			abortWith(c, e)
			return
		}
		email, e := requiredEmail(body.Email)
		if e != nil {
			abortWith(c, e)
			return
		}
		if hasKey {
			d.createOnce(c, key, username, email)
			return
		}
		u, err := d.users.CreateUser(writeContext(c), username, email)
		if err != nil {
			// The new id is unknown; only the count can be dropped.
			d.fail(c, err, []string{cache.CountKey(email)})
			return
		}
		d.invalidate(c, u.Outbox, cache.StaleAfterCreate(cache.UserRef{ID: u.ID, Email: u.Email}))
		sendCreated(c, createdAnswer(u.User))
	}
}

// createOnce is a create under an Idempotency-Key: the first request with a
// key inserts and stores its answer; a retry with the same body gets that
// answer again (Idempotent-Replayed: true) and writes nothing.
func (d writeDeps) createOnce(c *gin.Context, key, username, email string) {
	once, err := d.users.CreateUserOnce(writeContext(c), key, createRequestHash(username, email),
		username, email, createdAnswer)
	switch {
	case errors.Is(err, store.ErrKeyReused):
		abortWith(c, &apiError{status: http.StatusUnprocessableEntity, code: codeIdempotencyKeyReused,
			message: "this Idempotency-Key was already used with a different request body"})
		return
	case err != nil:
		d.fail(c, err, []string{cache.CountKey(email)})
		return
	}
	if once.Replayed {
		c.Header("Idempotent-Replayed", "true")
		// The first request dropped these keys, unless it died between its
		// commit and its DEL (a killed core): a client retries exactly then, so
		// the replay drops them again. A DEL is always safe: one more miss.
		if id := answerID(once.Answer); id > 0 {
			d.invalidate(c, 0, cache.StaleAfterCreate(cache.UserRef{ID: id, Email: email}))
		}
	} else {
		d.invalidate(c, once.Created.Outbox,
			cache.StaleAfterCreate(cache.UserRef{ID: once.Created.ID, Email: once.Created.Email}))
	}
	sendCreated(c, once.Answer)
}

// answerID is the user id in a create's answer body (0 if there is none).
func answerID(a store.Answer) int64 {
	var created struct {
		ID int64 `json:"id"`
	}
	if json.Unmarshal(a.Body, &created) != nil {
		return 0
	}
	return created.ID
}

// createdAnswer is the 201 of a create, as sent and as stored under a key.
func createdAnswer(u store.User) store.Answer {
	body, err := json.Marshal(newUserJSON(u))
	if err != nil {
		panic(err) // a struct of strings and an int always encodes
	}
	return store.Answer{Status: http.StatusCreated, Body: body}
}

// sendCreated sends a create's answer with the Location of the user in it.
func sendCreated(c *gin.Context, a store.Answer) {
	if id := answerID(a); id > 0 {
		c.Header("Location", "/api/v1/users/"+strconv.FormatInt(id, 10))
	}
	c.Data(a.Status, "application/json; charset=utf-8", a.Body)
}

func updateUser(d writeDeps) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, e := pathID(c)
		if e != nil {
			abortWith(c, e)
			return
		}
		var body userBody
		if e := decodeObject(c, &body, userFields...); e != nil {
			abortWith(c, e)
			return
		}
		upd, e := parseUpdate(body)
		if e != nil {
			abortWith(c, e)
			return
		}
		u, err := d.users.UpdateUser(writeContext(c), id, upd)
		if err != nil {
			// The old email is unknown here; count:<old email> may stay
			// stale until its TTL if this write did land.
			known := []string{cache.UserKey(id)}
			if upd.Email != nil {
				known = append(known, cache.CountKey(*upd.Email))
			}
			d.fail(c, err, known)
			return
		}
		d.invalidate(c, u.Outbox, cache.StaleAfterUpdate(
			cache.UserRef{ID: u.ID, Email: u.OldEmail}, cache.UserRef{ID: u.ID, Email: u.Email}))
		c.JSON(http.StatusOK, newUserJSON(u.User))
	}
}

func deleteUser(d writeDeps) gin.HandlerFunc {
	return func(c *gin.Context) {
		id, e := pathID(c)
		if e != nil {
			abortWith(c, e)
			return
		}
		u, err := d.users.DeleteUser(writeContext(c), id)
		if err != nil {
			d.fail(c, err, []string{cache.UserKey(id)})
			return
		}
		d.invalidate(c, u.Outbox, cache.StaleAfterDelete(cache.UserRef{ID: u.ID, Email: u.Email}))
		c.Status(http.StatusNoContent)
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

// fail answers a failed write. knownKeys are the keys the write would have
// made stale that are known without its result; they are dropped when the
// write may have landed unseen.
func (d writeDeps) fail(c *gin.Context, err error, knownKeys []string) {
	var unavailable *store.UnavailableError
	switch {
	case errors.Is(err, store.ErrNotFound):
		abortWith(c, &apiError{status: http.StatusNotFound, code: codeNotFound, message: "no user with this id"})
	case errors.Is(err, store.ErrConflict):
		abortWith(c, &apiError{status: http.StatusConflict, code: codeConflict, message: "username already exists"})
	case errors.As(err, &unavailable):
		if unavailable.MaybeApplied {
			d.uncertain()
			d.log.Warn("write outcome unknown; dropping the keys it may have made stale", "err", err)
			if ierr := d.invalidator.Invalidate(context.WithoutCancel(c.Request.Context()), knownKeys); ierr != nil {
				d.log.Error("cache invalidation after an uncertain write failed", "keys", knownKeys, "err", ierr)
			}
		} else {
			d.log.Warn("database unavailable", "err", err)
		}
		abortUnavailable(c, codeDatabaseUnavailable, "the database is unavailable; retry later")
	default:
		d.log.Error("write failed", "err", err)
		abortWith(c, &apiError{status: http.StatusInternalServerError, code: codeInternal, message: "internal error"})
	}
}

func pathID(c *gin.Context) (int64, *apiError) {
	id, ok := validate.ID(c.Param("id"))
	if !ok {
		return 0, badRequest(codeInvalidID, "id must be a decimal integer from 1 to 9223372036854775807")
	}
	return id, nil
}

func requiredUsername(raw json.RawMessage) (string, *apiError) {
	if !present(raw) {
		return "", badRequest(codeInvalidUsername, "username is required")
	}
	return usernameValue(raw)
}

func requiredEmail(raw json.RawMessage) (string, *apiError) {
	if !present(raw) {
		return "", badRequest(codeInvalidEmail, "email is required")
	}
	return emailValue(raw)
}

func usernameValue(raw json.RawMessage) (string, *apiError) {
	s, ok := stringField(raw)
	if !ok {
		return "", badRequest(codeInvalidUsername, "username must be a string")
	}
	if reason := validate.Username(s); reason != "" {
		return "", badRequest(codeInvalidUsername, reason)
	}
	return s, nil
}

func emailValue(raw json.RawMessage) (string, *apiError) {
	s, ok := stringField(raw)
	if !ok {
		return "", badRequest(codeInvalidEmail, "email must be a string")
	}
	if hadLoneSurrogate(raw, s) {
		return "", badRequest(codeInvalidEmail, "email must not contain a lone UTF-16 surrogate escape")
	}
	if reason := validate.Email(s); reason != "" {
		return "", badRequest(codeInvalidEmail, reason)
	}
	return s, nil
}

func parseUpdate(body userBody) (store.Update, *apiError) {
	var upd store.Update
	if !present(body.Username) && !present(body.Email) {
		return upd, badRequest(codeInvalidRequest, "give at least one of username, email")
	}
	if present(body.Username) {
		s, e := usernameValue(body.Username)
		if e != nil {
			return upd, e
		}
		upd.Username = &s
	}
	if present(body.Email) {
		s, e := emailValue(body.Email)
		if e != nil {
			return upd, e
		}
		upd.Email = &s
	}
	return upd, nil
}
