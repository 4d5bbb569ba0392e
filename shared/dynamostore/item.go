package dynamostore

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// Attribute names. They are short because every byte of an item counts towards its write units.
const (
	attrPK          = "pk"
	attrSK          = "sk"
	attrDuePK       = "due_pk"
	attrDueSK       = "due_sk"
	attrListPK      = "list_pk"
	attrListSK      = "list_sk"
	attrExpires     = "expires" // TTL, epoch seconds; set on terminal tasks only
	attrLambda      = "lambda"
	attrID          = "id"
	attrCollection  = "coll"
	attrPriority    = "prio"
	attrStatus      = "status"
	attrPayload     = "payload"
	attrResult      = "result"
	attrError       = "error"
	attrAttempts    = "attempts"
	attrMaxAttempts = "max_attempts"
	attrRunAt       = "run_at"
	attrDeadline    = "deadline"
	attrNextTrigger = "next_at"
	attrCreatedAt   = "created_at"
	attrUpdatedAt   = "updated_at"
	attrVersion     = "version"
	attrLease       = "lease"
	attrSpec        = "spec"
	attrMode        = "mode"
	attrParked      = "parked" // BOOL, present only when true
)

// Index names and the attributes they project besides the keys.
const (
	// DueIndex holds one entry per task that has a next trigger (sparse: terminal tasks leave it).
	DueIndex = "due"
	// ListIndex holds one entry per task, in creation order, for lists and counts.
	ListIndex = "list"
)

var (
	dueProjection  = []string{attrID, attrStatus, attrCollection, attrPriority}
	listProjection = []string{attrID, attrStatus, attrCollection}
)

// Key values. '#' separates the parts: lambda and priority names, ids and collections never hold
// one (task.ValidateName and task.ValidateID).
const (
	taskSK     = "task"
	gatePK     = "gate"
	laneRun    = "r" // claimed and processing tasks, whatever their priority
	laneWait   = "w" // waiting tasks, by priority
	laneParked = "p" // waiting tasks a gate parked, by collection
)

func taskPK(lambda, id string) string { return "task#" + lambda + "#" + id }

func duePK(lambda string, shard int) string  { return "due#" + lambda + "#" + strconv.Itoa(shard) }
func listPK(lambda string, shard int) string { return "list#" + lambda + "#" + strconv.Itoa(shard) }

// stamp is a time as 19 zero-padded digits of unix nanoseconds, so that strings sort as times.
func stamp(t time.Time) string { return fmt.Sprintf("%019d", t.UnixNano()) }

// dueSK orders a lambda shard's due entries by lane, then trigger time, then id: a waiting task
// sits at w#<priority>#<trigger>#<id>, a running one at r#<trigger>#<id>, a parked one at
// p#<collection>#<trigger>#<id>.
func dueSK(t task.Task) string {
	switch {
	case isRunning(t.Status):
		return laneRun + "#" + stamp(*t.NextTriggerAt) + "#" + t.ID
	case t.Parked:
		return laneParked + "#" + t.Collection + "#" + stamp(*t.NextTriggerAt) + "#" + t.ID
	}
	return laneWait + "#" + t.Priority + "#" + stamp(*t.NextTriggerAt) + "#" + t.ID
}

func listSK(t task.Task) string { return stamp(t.CreatedAt) + "#" + t.ID }

func isRunning(s task.Status) bool { return s == task.StatusClaimed || s == task.StatusProcessing }

// shardOf spreads a lambda's tasks over n index partitions by a hash of the id.
func shardOf(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// marshal returns the item of a task: the task itself and its index keys.
func (st *Store) marshal(t task.Task) map[string]types.AttributeValue {
	shard := shardOf(t.ID, st.shards(t.Lambda))
	item := map[string]types.AttributeValue{
		attrPK: s(taskPK(t.Lambda, t.ID)), attrSK: s(taskSK),
		attrListPK: s(listPK(t.Lambda, shard)), attrListSK: s(listSK(t)),
		attrLambda: s(t.Lambda), attrID: s(t.ID), attrPriority: s(t.Priority),
		attrStatus: s(string(t.Status)), attrAttempts: n(int64(t.Attempts)),
		attrMaxAttempts: n(int64(t.MaxAttempts)), attrVersion: n(t.Version),
	}
	// Empty strings and absent values are left out: it keeps the item small.
	for name, v := range map[string]string{attrCollection: t.Collection, attrError: t.Error, attrLease: t.Lease, attrSpec: t.Spec} {
		if v != "" {
			item[name] = s(v)
		}
	}
	if len(t.Payload) > 0 {
		item[attrPayload] = &types.AttributeValueMemberB{Value: t.Payload}
	}
	if len(t.Result) > 0 {
		item[attrResult] = &types.AttributeValueMemberB{Value: t.Result}
	}
	for name, v := range map[string]*time.Time{attrRunAt: &t.RunAt, attrCreatedAt: &t.CreatedAt, attrUpdatedAt: &t.UpdatedAt, attrDeadline: t.Deadline, attrNextTrigger: t.NextTriggerAt} {
		if v != nil && !v.IsZero() {
			item[name] = n(v.UnixNano())
		}
	}
	if t.Parked {
		item[attrParked] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if t.NextTriggerAt != nil {
		item[attrDuePK] = s(duePK(t.Lambda, shard))
		item[attrDueSK] = s(dueSK(t))
	}
	if t.Status.Terminal() {
		at := t.UpdatedAt
		if at.IsZero() {
			at = st.now()
		}
		item[attrExpires] = n(at.Add(st.cfg.Retention).Unix())
	}
	return item
}

// unmarshal reads a task item back.
func unmarshal(item map[string]types.AttributeValue) (task.Task, error) {
	var t task.Task
	var err error
	str := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	num := func(name string) int64 {
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		i, perr := strconv.ParseInt(v.Value, 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("attribute %s: %w", name, perr)
		}
		return i
	}
	tm := func(name string) *time.Time {
		if _, ok := item[name]; !ok {
			return nil
		}
		v := time.Unix(0, num(name)).UTC()
		return &v
	}
	val := func(p *time.Time) time.Time {
		if p == nil {
			return time.Time{}
		}
		return *p
	}
	bin := func(name string) []byte {
		if v, ok := item[name].(*types.AttributeValueMemberB); ok {
			return v.Value
		}
		return nil
	}
	t.ID, t.Lambda, t.Collection, t.Priority = str(attrID), str(attrLambda), str(attrCollection), str(attrPriority)
	t.Status, t.Error, t.Lease, t.Spec = task.Status(str(attrStatus)), str(attrError), str(attrLease), str(attrSpec)
	t.Payload, t.Result = bin(attrPayload), bin(attrResult)
	t.Attempts, t.MaxAttempts, t.Version = int(num(attrAttempts)), int(num(attrMaxAttempts)), num(attrVersion)
	t.RunAt, t.CreatedAt, t.UpdatedAt = val(tm(attrRunAt)), val(tm(attrCreatedAt)), val(tm(attrUpdatedAt))
	t.Deadline, t.NextTriggerAt = tm(attrDeadline), tm(attrNextTrigger)
	if v, ok := item[attrParked].(*types.AttributeValueMemberBOOL); ok {
		t.Parked = v.Value
	}
	if t.ID == "" || t.Lambda == "" {
		return task.Task{}, fmt.Errorf("item %s is not a task", str(attrPK))
	}
	return t, err
}

// parseStamp reads the trigger time and id at the end of a due or list sort key.
func parseStamp(sk string) (nanos int64, id string, ok bool) {
	parts := strings.Split(sk, "#")
	if len(parts) < 2 {
		return 0, "", false
	}
	id = parts[len(parts)-1]
	nanos, err := strconv.ParseInt(parts[len(parts)-2], 10, 64)
	return nanos, id, err == nil && len(parts[len(parts)-2]) == 19 && id != ""
}
