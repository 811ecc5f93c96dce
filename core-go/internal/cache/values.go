package cache

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"

	"github.com/klauspost/compress/zstd"
)

// The stored form of large values (contracts/cache.json "large_values"):
// the gateway stores a track's answer as its JSON text, or compressed and
// recognised by the codec's own magic number, or as the too-large marker.
// The core stores no track; this is its reading of the same format, so a
// value either side writes is one the other can read.
const (
	CodecZstd                = "zstd"
	CodecGzip                = "gzip"
	TooLargeMarker           = "!too-large"
	LargeValueThresholdBytes = 65536
	DefaultLargeValuePolicy  = "compress"
	DefaultCodec             = CodecZstd
	SimplifyToleranceDefault = "0.0001"
	DecodedMaxBytes          = 64 << 20
)

var (
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
	gzipMagic = []byte{0x1f, 0x8b}
)

// ErrTooLarge is the marker: the value was not stored; read the database.
var ErrTooLarge = errors.New("the value was too large to store")

// Codec names the codec a stored value was written with ("" for plain JSON).
func Codec(stored []byte) string {
	switch {
	case bytes.HasPrefix(stored, zstdMagic):
		return CodecZstd
	case bytes.HasPrefix(stored, gzipMagic):
		return CodecGzip
	}
	return ""
}

// EncodeValue compresses value with codec ("" keeps it as it is).
func EncodeValue(value []byte, codec string) ([]byte, error) {
	switch codec {
	case "":
		return value, nil
	case CodecZstd:
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer enc.Close()
		return enc.EncodeAll(value, nil), nil
	case CodecGzip:
		var out bytes.Buffer
		w := gzip.NewWriter(&out)
		if _, err := w.Write(value); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return out.Bytes(), nil
	}
	return nil, errors.New("unknown codec " + codec)
}

// DecodeValue returns the JSON text of a stored value, ErrTooLarge for the
// marker. Decoded sizes are bounded (DecodedMaxBytes): a corrupt or hostile
// frame cannot make it allocate without limit.
func DecodeValue(stored []byte) ([]byte, error) {
	if string(stored) == TooLargeMarker {
		return nil, ErrTooLarge
	}
	switch Codec(stored) {
	case CodecZstd:
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(DecodedMaxBytes))
		if err != nil {
			return nil, err
		}
		defer dec.Close()
		return dec.DecodeAll(stored, nil)
	case CodecGzip:
		r, err := gzip.NewReader(bytes.NewReader(stored))
		if err != nil {
			return nil, err
		}
		out, err := io.ReadAll(io.LimitReader(r, DecodedMaxBytes+1))
		if err != nil {
			return nil, err
		}
		if len(out) > DecodedMaxBytes {
			return nil, errors.New("decoded value over the size bound")
		}
		return out, nil
	}
	return stored, nil
}
