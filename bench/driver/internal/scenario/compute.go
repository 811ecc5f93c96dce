package scenario

import (
	"encoding/json"
	"reflect"
	"regexp"
)

// Compute is POST /api/v1/compute with a fixed body; the answer must carry
// every field of expect, and a bcrypt hash must match hash.
type Compute struct {
	name   string
	url    []byte
	body   []byte
	expect map[string]any
	hash   *regexp.Regexp
}

// NewCompute is a compute scenario named name.
func NewCompute(name string, c *Client, body []byte, expect map[string]any, hash *regexp.Regexp) *Compute {
	return &Compute{name: name, url: c.URL("/api/v1/compute"), body: body, expect: expect, hash: hash}
}

// Name implements Scenario.
func (s *Compute) Name() string { return s.name }

// Names implements Scenario.
func (s *Compute) Names() []string { return []string{"compute"} }

// Iterate implements Scenario.
func (s *Compute) Iterate(w *Worker) bool {
	w.Send("POST", s.url, s.body)
	x := w.Do()
	answered := x.Status == 200
	ok := answered && s.AnswerFits(w.Resp.Body())
	w.Record(0, &x, answered, ok)
	return ok
}

// AnswerFits is true when body carries every expected field exactly (and,
// for bcrypt, a hash of the expected shape). The rate is low: encoding/json will do.
func (s *Compute) AnswerFits(body []byte) bool {
	var got map[string]any
	if json.Unmarshal(body, &got) != nil || got == nil {
		return false
	}
	for k, want := range s.expect {
		if !reflect.DeepEqual(got[k], want) {
			return false
		}
	}
	if s.expect["kind"] != "bcrypt" {
		return true
	}
	hash, ok := got["hash"].(string)
	return ok && s.hash != nil && s.hash.MatchString(hash)
}
