package scenario

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"aside/bench/driver/internal/config"
)

// The seeder's files in DATA_DIR.
const (
	HotEmailsFile  = "hot_emails.json"
	ColdEmailsFile = "cold_emails.json"
	UserIDsFile    = "user_ids.json"
	TracksFile     = "tracks.json"
	// KeySpaceFile is every distinct email of the table, one a line, sorted.
	KeySpaceFile = "emails.txt"
)

func dataError(format string, args ...any) error {
	return &config.Error{Name: "DATA_DIR", Reason: fmt.Sprintf(format, args...)}
}

func readData(dir, file string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil, dataError("has no readable %s: %v", file, err)
	}
	return raw, nil
}

// LoadEmails reads a list of emails: a JSON list or {"emails": [...]};
// limit > 0 keeps the first limit.
func LoadEmails(dir, file string, limit int) ([]string, error) {
	return loadList[string](dir, file, "emails", limit)
}

// loadList reads file: a JSON list, or an object holding the list under key
// (which also names what the list holds in errors); limit > 0 keeps the first
// limit.
func loadList[T any](dir, file, key string, limit int) ([]T, error) {
	raw, err := readData(dir, file)
	if err != nil {
		return nil, err
	}
	var list []T
	if json.Unmarshal(raw, &list) != nil {
		var wrapped map[string]json.RawMessage
		err := json.Unmarshal(raw, &wrapped)
		if inner, ok := wrapped[key]; err == nil && ok {
			err = json.Unmarshal(inner, &list)
		}
		if err != nil {
			return nil, dataError("%s is not a list of %s", file, key)
		}
	}
	if len(list) == 0 {
		return nil, dataError("%s holds no list", file)
	}
	if limit > 0 && len(list) > limit {
		list = list[:limit]
	}
	return list, nil
}

// LoadKeySpace reads emails.txt: one key a line (blank lines skipped);
// limit > 0 keeps the first limit.
func LoadKeySpace(dir string, limit int) ([]string, error) {
	raw, err := readData(dir, KeySpaceFile)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			keys = append(keys, line)
		}
		if limit > 0 && len(keys) == limit {
			break
		}
	}
	if len(keys) == 0 {
		return nil, dataError("%s holds no key", KeySpaceFile)
	}
	return keys, nil
}

// LoadIDs reads user_ids.json: a JSON list or {"ids": [...]}; limit > 0
// keeps the first limit.
func LoadIDs(dir string, limit int) ([]int64, error) {
	return loadList[int64](dir, UserIDsFile, "ids", limit)
}

// Track is one seeded track: its id and the size of its path.
type Track struct {
	ID    int64 `json:"id"`
	Bytes int64 `json:"bytes"`
}

// LoadTracks reads tracks.json: {"tracks": [{"id": ..., "bytes": ...}]}.
func LoadTracks(dir string) ([]Track, error) {
	raw, err := readData(dir, TracksFile)
	if err != nil {
		return nil, err
	}
	var file struct {
		Tracks []Track `json:"tracks"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, dataError("%s is not {\"tracks\": [...]}: %v", TracksFile, err)
	}
	if len(file.Tracks) == 0 {
		return nil, dataError("%s holds no track", TracksFile)
	}
	return file.Tracks, nil
}
