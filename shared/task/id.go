package task

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"time"
)

// Crockford's alphabet is in ASCII order, so ids sort by creation time.
var idEncoding = base32.NewEncoding("0123456789ABCDEFGHJKMNPQRSTVWXYZ").WithPadding(base32.NoPadding)

// NewID returns a 26-character id: 48 bits of milliseconds since the epoch, then 80 random bits.
// Ids made later sort later, which keeps lists and store pages in creation order.
func NewID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	rand.Read(b[6:])
	return idEncoding.EncodeToString(b[:])
}

// NewLease returns a fresh fencing token. Each claim gets its own, so a worker that lost its
// claim can no longer heartbeat or report a result.
func NewLease() string { return rand.Text() }
