package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/aside-lab/aside/core-go/internal/store"
	"github.com/aside-lab/aside/core-go/internal/testenv"
	"github.com/aside-lab/aside/core-go/internal/userjson"
)

var createdAtPattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

func TestUserJSONVectors(t *testing.T) {
	var contract struct {
		UserJSON []struct {
			Row struct {
				ID                  int64  `json:"id"`
				Username            string `json:"username"`
				Email               string `json:"email"`
				CreatedAtUnixMicros int64  `json:"created_at_unix_micros"`
			} `json:"row"`
			JSON map[string]any `json:"json"`
		} `json:"user_json"`
	}
	testenv.LoadContract(t, "cache.json", &contract)
	if len(contract.UserJSON) == 0 {
		t.Fatal("no user_json vectors")
	}
	for _, v := range contract.UserJSON {
		// A non-UTC location must not change the output.
		created := time.UnixMicro(v.Row.CreatedAtUnixMicros).In(time.FixedZone("X", 5*3600))
		got := userjson.From(store.User{ID: v.Row.ID, Username: v.Row.Username, Email: v.Row.Email, CreatedAt: created})
		var gotMap map[string]any
		_ = json.Unmarshal([]byte(mustJSON(t, got)), &gotMap)
		if mustJSON(t, gotMap) != mustJSON(t, v.JSON) {
			t.Errorf("user JSON %v, want %v", gotMap, v.JSON)
		}
	}
}

func TestCreateUser(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	rec := s.do(http.MethodPost, "/api/v1/users", `{"username":"ada","email":"ada@example.com"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	u := decodeUser(t, rec)
	if u.ID != 1 || u.Username != "ada" || u.Email != "ada@example.com" || !createdAtPattern.MatchString(u.CreatedAt) {
		t.Fatalf("body %+v", u)
	}
	if loc := rec.Header().Get("Location"); loc != "/api/v1/users/1" {
		t.Fatalf("Location %q", loc)
	}
	var dbCreated time.Time
	if err := env.Pool.QueryRow(context.Background(), "SELECT created_at FROM users WHERE id = 1").Scan(&dbCreated); err != nil {
		t.Fatal(err)
	}
	if want := dbCreated.UTC().Format(userjson.CreatedAtLayout); u.CreatedAt != want {
		t.Fatalf("created_at %q, database has %q", u.CreatedAt, want)
	}
	if got := rows(t); got[1] != (row{"ada", "ada@example.com"}) || len(got) != 1 {
		t.Fatalf("rows %v", got)
	}
	if rec.Header().Get("X-Cache-Invalidation") != "" {
		t.Fatal("invalidation reported failed with Redis up")
	}
}

func TestCreateAcceptsJSONWithCharset(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	req := jsonRequest(http.MethodPost, "/api/v1/users", `{"email":"a@b.co","username":"ab"}`, "application/json; charset=utf-8")
	if rec := s.send(req); rec.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}

func TestUpdateUser(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	created := s.mustCreate(t, "ada", "ada@example.com")

	steps := []struct {
		body string
		want row
	}{
		{`{"username":"lovelace"}`, row{"lovelace", "ada@example.com"}},
		{`{"email":"countess@example.com"}`, row{"lovelace", "countess@example.com"}},
		{`{"username":"ada.l","email":"ada@example.org"}`, row{"ada.l", "ada@example.org"}},
		{`{"username":"ada.l"}`, row{"ada.l", "ada@example.org"}}, // no change is fine
	}
	for _, st := range steps {
		rec := s.do(http.MethodPatch, "/api/v1/users/1", st.body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d %s", st.body, rec.Code, rec.Body)
		}
		u := decodeUser(t, rec)
		if u.ID != 1 || u.Username != st.want.Username || u.Email != st.want.Email || u.CreatedAt != created.CreatedAt {
			t.Fatalf("%s: body %+v", st.body, u)
		}
		if got := rows(t)[1]; got != st.want {
			t.Fatalf("%s: row %v", st.body, got)
		}
	}
}

func TestDeleteUser(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	s.mustCreate(t, "ada", "ada@example.com")
	s.mustCreate(t, "bob", "bob@example.com")
	rec := s.do(http.MethodDelete, "/api/v1/users/1", "")
	if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("status %d body %q", rec.Code, rec.Body)
	}
	if got := rows(t); len(got) != 1 || got[2].Username != "bob" {
		t.Fatalf("rows %v", got)
	}
	wantError(t, s.do(http.MethodDelete, "/api/v1/users/1", ""), http.StatusNotFound, codeNotFound)
}

func TestMissingUser(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	wantError(t, s.do(http.MethodPatch, "/api/v1/users/42", `{"username":"x"}`), http.StatusNotFound, codeNotFound)
	wantError(t, s.do(http.MethodDelete, "/api/v1/users/9223372036854775807", ""), http.StatusNotFound, codeNotFound)
	if env.UserCount(t) != 0 {
		t.Fatal("rows appeared")
	}
}

func TestUsernameConflict(t *testing.T) {
	env.Reset(t)
	s := newServer(t, serverOpts{})
	s.mustCreate(t, "ada", "ada@example.com")
	s.mustCreate(t, "bob", "bob@example.com")
	before := rows(t)
	wantError(t, s.do(http.MethodPost, "/api/v1/users", `{"username":"ada","email":"other@example.com"}`),
		http.StatusConflict, codeConflict)
	wantError(t, s.do(http.MethodPatch, "/api/v1/users/2", `{"username":"ada","email":"new@example.com"}`),
		http.StatusConflict, codeConflict)
	if after := rows(t); !equalRows(before, after) {
		t.Fatalf("a conflicting write changed rows: %v -> %v", before, after)
	}
	// The same email twice is fine: only usernames are unique.
	s.mustCreate(t, "carol", "ada@example.com")
}
