package sqlitestore

import (
	"path/filepath"
	"testing"

	"github.com/openatf/atf/shared/storetest"
	"github.com/openatf/atf/shared/task"
)

// BenchmarkStore: claim and due sweep on the embedded store (make bench; benchstat compares runs).
func BenchmarkStore(b *testing.B) {
	storetest.Benchmark(b, func(b *testing.B) task.Store {
		s, err := Open(filepath.Join(b.TempDir(), "atf.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}
