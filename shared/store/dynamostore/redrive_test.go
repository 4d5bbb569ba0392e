package dynamostore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// TestRedriveLivesWithoutTTL: an ended task's items carry a TTL; once redriven, none of its items
// does (task item, payload item, after-list chunks), and the old payload item and chunks are gone.
// A task whose payload item TTL already removed is refused unless the redrive brings a payload.
func TestRedriveLivesWithoutTTL(t *testing.T) {
	ctx := t.Context()
	db, table := newTable(t, nil)
	s := newStore(t, db, dynamostore.Config{Table: table})
	l := task.Lambda{Name: "revive"}.WithDefaults()
	cfg := task.Config{}.WithDefaults()
	now := time.Now().UTC()
	big := []byte(`"` + strings.Repeat("x", 10_000) + `"`)

	tk := pendingTask(t, l, "big", refs(150, "revive", "other"), now)
	tk.Payload = big
	if err := s.Create(ctx, tk); err != nil {
		t.Fatal(err)
	}
	dead := tk
	dead.Status, dead.NextTriggerAt, dead.Version, dead.Error = task.StatusDead, nil, tk.Version+1, "boom"
	if err := s.Update(ctx, dead, tk.Version); err != nil {
		t.Fatal(err)
	}
	before := rawItems(t, db, table, "revive", "big")
	for sk, item := range before {
		if item["expires"] == nil {
			t.Fatalf("dead task: item %s has no TTL", sk)
		}
	}
	read, err := s.Get(ctx, "revive", "big")
	if err != nil {
		t.Fatal(err)
	}
	next, err := task.Redrive(read, task.RedriveOptions{}, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Redrive(ctx, next, read.Version); err != nil {
		t.Fatal(err)
	}
	after := rawItems(t, db, table, "revive", "big")
	if len(after) != len(before) {
		t.Errorf("redriven task: %d items, want %d (the old payload and chunks replaced)", len(after), len(before))
	}
	for sk, item := range after {
		if item["expires"] != nil {
			t.Errorf("redriven task: item %s keeps a TTL", sk)
		}
		if _, was := before[sk]; was && sk != "task" {
			t.Errorf("redriven task: item %s of its first life is still there", sk)
		}
	}
	got := mustGet(t, s, "revive", "big")
	if string(got.Payload) != string(big) || len(got.After) != 150 || got.Status != task.StatusNew {
		t.Errorf("redriven task reads %s, %d-byte payload, %d upstreams", got.Status, len(got.Payload), len(got.After))
	}

	// Its second life ends too; then TTL removes its payload item before its task item.
	ended := got
	ended.Status, ended.NextTriggerAt, ended.Version = task.StatusFatalFailure, nil, got.Version+1
	if err := s.Update(ctx, ended, got.Version); err != nil {
		t.Fatal(err)
	}
	for sk, item := range rawItems(t, db, table, "revive", "big") {
		if strings.HasPrefix(sk, "payload#") {
			if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{"pk": item["pk"], "sk": item["sk"]}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	read = mustGet(t, s, "revive", "big")
	if read.Payload != nil {
		t.Fatalf("the payload item is gone, yet Get reads a payload")
	}
	next, err = task.Redrive(read, task.RedriveOptions{}, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Redrive(ctx, next, read.Version); !errors.Is(err, task.ErrConflict) || !strings.Contains(err.Error(), "payload") {
		t.Fatalf("redrive of a task whose payload is gone: %v, want a conflict asking for a payload", err)
	}
	if got := mustGet(t, s, "revive", "big"); got.Status != task.StatusFatalFailure {
		t.Fatalf("a refused redrive left the task %s", got.Status)
	}
	next, err = task.Redrive(read, task.RedriveOptions{Payload: []byte(`{"new":true}`)}, now, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Redrive(ctx, next, read.Version); err != nil {
		t.Fatalf("redrive with a new payload: %v", err)
	}
	if got := mustGet(t, s, "revive", "big"); string(got.Payload) != `{"new":true}` || got.Status != task.StatusNew {
		t.Errorf("redriven with a new payload: %s, %s", got.Status, got.Payload)
	}
}
