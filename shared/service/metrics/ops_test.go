package metrics_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/openatf/atf/shared/service/metrics"
)

// TestStoreOpsListed: StoreOps lists exactly the ops that Store checks, so that a Recorder that
// shows them from the start shows every one.
func TestStoreOpsListed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "store.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var checked []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "check" && len(call.Args) == 2 {
			if lit, ok := call.Args[0].(*ast.BasicLit); ok {
				op, _ := strconv.Unquote(lit.Value)
				checked = append(checked, op)
			}
		}
		return true
	})
	slices.Sort(checked)
	checked = slices.Compact(checked)
	listed := slices.Sorted(slices.Values(metrics.StoreOps))
	if len(checked) == 0 || !slices.Equal(checked, listed) {
		t.Fatalf("Store checks ops %v; StoreOps lists %v", checked, listed)
	}
}
