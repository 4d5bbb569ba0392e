package dynamostore_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/task"
)

// An app writes its order and the task that ships it in one TransactWriteItems: the task exists
// if and only if the order does, and the consumer's sweep enqueues it like any waiting task.
// (Not run: it needs DynamoDB; shared/local's TestTransactEnqueueAWS runs it on DynamoDB Local.)
func ExampleStore_CreateTransactItems() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	db := dynamostore.NewClient(cfg)
	store, err := dynamostore.New(db, dynamostore.Config{Table: "atf-prod"})
	if err != nil {
		log.Fatal(err)
	}

	// The lambda's settings and the task config are those of the deployed registry.
	ship, err := task.New(task.Spec{ID: "ship-order-42", Payload: []byte(`{"order":42}`)},
		task.Lambda{Name: "ship"}.WithDefaults(), time.Now().UTC(), task.Config{}.WithDefaults())
	if err != nil {
		log.Fatal(err)
	}
	items, err := store.CreateTransactItems(ship) // first, so the task item is at index 0
	if err != nil {
		log.Fatal(err)
	}
	items = append(items, types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String("orders"),
		Item:      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "42"}},
	}})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err := dynamostore.CreateRefused(err, ship, 0); errors.Is(err, task.ErrExists) {
		log.Print("a replay: neither the order nor the task was written again")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	store.Created(ctx, ship) // the counts, as Create keeps them
}
