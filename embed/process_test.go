package embed

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLeavesTheProcessAlone: the package sets nothing process-wide
// (doc.go): several instances may share a test's process, and the binary
// decides signals, exits, GOMAXPROCS and Go's memory limit.
func TestLeavesTheProcessAlone(t *testing.T) {
	forbidden := map[string]bool{"os.Exit": true, "runtime.GOMAXPROCS": true, "debug.SetMemoryLimit": true,
		"signal.Notify": true, "signal.NotifyContext": true, "slog.SetDefault": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "os/signal" {
				t.Errorf("%s imports os/signal", name)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && forbidden[x.Name+"."+sel.Sel.Name] {
				t.Errorf("%s: %s.%s", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
			}
			return true
		})
	}
}
