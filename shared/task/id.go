package task

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"strconv"
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

// DeliveryLease is the lease of a claim made for one delivery of a task's message (its receipt)
// by one claim call (token, a random value its caller picks and keeps for the call's retries):
// the attempt-th claim of task id of lambda. A claim sent again by the same call, as when its
// answer was lost and the call was retried, finds the task claimed with this lease and gets the
// same claim back, rather than losing the attempt to a claim nobody runs. Another delivery, a
// duplicate message included, or another caller of the same delivery (a batch processed twice)
// can never compute it. An empty token gives the lease of callers older than tokens, which every
// caller of the delivery shares.
func DeliveryLease(lambda, id, delivery, token string, attempt int) string {
	key := lambda + "\x00" + id + "\x00" + strconv.Itoa(attempt) + "\x00" + delivery
	if token != "" {
		key += "\x00" + token
	}
	h := sha256.Sum256([]byte(key))
	return idEncoding.EncodeToString(h[:16])
}
