package cache_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/aside-lab/aside/core-go/internal/cache"
	"github.com/aside-lab/aside/core-go/internal/testenv"
)

type largeValuesContract struct {
	LargeValues struct {
		ThresholdBytesDefault    int               `json:"threshold_bytes_default"`
		DefaultPolicy            string            `json:"default_policy"`
		Codecs                   map[string]string `json:"codecs"`
		DefaultCodec             string            `json:"default_codec"`
		SimplifyToleranceDefault string            `json:"simplify_tolerance_default"`
		TooLargeMarker           string            `json:"too_large_marker"`
		DecodedMaxBytes          int               `json:"decoded_max_bytes"`
		Vectors                  []struct {
			Codec        string `json:"codec"`
			JSON         string `json:"json"`
			StoredBase64 string `json:"stored_base64"`
		} `json:"vectors"`
	} `json:"large_values"`
}

func loadLarge(t *testing.T) largeValuesContract {
	var c largeValuesContract
	testenv.LoadContract(t, "cache.json", &c)
	return c
}

func TestLargeValueConstantsMatchContract(t *testing.T) {
	lv := loadLarge(t).LargeValues
	if lv.ThresholdBytesDefault != cache.LargeValueThresholdBytes || lv.DefaultPolicy != cache.DefaultLargeValuePolicy ||
		lv.DefaultCodec != cache.DefaultCodec || lv.TooLargeMarker != cache.TooLargeMarker ||
		lv.SimplifyToleranceDefault != cache.SimplifyToleranceDefault || lv.DecodedMaxBytes != cache.DecodedMaxBytes {
		t.Fatalf("cache.json large_values %+v differs from the package constants", lv)
	}
	if len(lv.Codecs) != 2 || lv.Codecs[cache.CodecZstd] != "28b52ffd" || lv.Codecs[cache.CodecGzip] != "1f8b" {
		t.Fatalf("codecs %v", lv.Codecs)
	}
}

// A value the gateway compressed (Python's zstandard and gzip) decodes here.
func TestDecodesTheContractsVectors(t *testing.T) {
	lv := loadLarge(t).LargeValues
	if len(lv.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range lv.Vectors {
		stored, err := base64.StdEncoding.DecodeString(v.StoredBase64)
		if err != nil {
			t.Fatal(err)
		}
		if got := cache.Codec(stored); got != v.Codec {
			t.Errorf("Codec = %q, want %q", got, v.Codec)
		}
		got, err := cache.DecodeValue(stored)
		if err != nil || string(got) != v.JSON {
			t.Errorf("%s: DecodeValue = %q, %v", v.Codec, got, err)
		}
	}
}

func TestRoundTripAndPlainValues(t *testing.T) {
	value := bytes.Repeat([]byte(`[13.405123,52.520001],`), 5000)
	for _, codec := range []string{cache.CodecZstd, cache.CodecGzip} {
		stored, err := cache.EncodeValue(value, codec)
		if err != nil || cache.Codec(stored) != codec || len(stored) >= len(value)/10 {
			t.Fatalf("%s: %d bytes from %d, %v", codec, len(stored), len(value), err)
		}
		back, err := cache.DecodeValue(stored)
		if err != nil || !bytes.Equal(back, value) {
			t.Fatalf("%s: round trip failed: %v", codec, err)
		}
	}
	for _, plain := range []string{`{"id":1}`, `null`} {
		if got, err := cache.DecodeValue([]byte(plain)); err != nil || string(got) != plain || cache.Codec([]byte(plain)) != "" {
			t.Fatalf("plain %s: %q %v", plain, got, err)
		}
	}
	if _, err := cache.DecodeValue([]byte(cache.TooLargeMarker)); !errors.Is(err, cache.ErrTooLarge) {
		t.Fatalf("marker: %v", err)
	}
	if _, err := cache.DecodeValue(append([]byte{0x28, 0xb5, 0x2f, 0xfd}, "garbage"...)); err == nil {
		t.Fatal("a corrupt zstd frame decoded")
	}
}
