package dynamostore_test

import (
	"os"
	"testing"

	"github.com/openatf/atf/shared/store/dynamostore"
	"github.com/openatf/atf/shared/store/storetest"
	"github.com/openatf/atf/shared/task"
	"github.com/openatf/atf/shared/testkit/awstest"
)

// BenchmarkStore: claim and due sweep on DynamoDB (make bench runs it on DynamoDB Local). Unlike
// the tests, the benchmark skips when no endpoint is set, whatever ATF_AWS_TESTS says.
func BenchmarkStore(b *testing.B) {
	if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
		b.Skip("no DynamoDB endpoint: start the emulators with `make emulators` and export what it prints")
	}
	storetest.Benchmark(b, func(b *testing.B) task.Store {
		db := awstest.NewDynamoDB(awstest.Config(b, "DYNAMODB"))
		table := awstest.Name("atf-bench")
		if err := dynamostore.CreateTable(b.Context(), db, table); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dynamostore.DeleteTable(b.Context(), db, table) })
		s, err := dynamostore.New(db, dynamostore.Config{Table: table})
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
}
