package core_test

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// forbidden lists import paths core must not use directly: core is a pure
// state machine, driven from outside with the clock and all IO injected.
var forbidden = []string{
	"net", "os", "os/exec", "sync", "sync/atomic", "math/rand", "math/rand/v2", "crypto/rand",
	"time/tzdata", "syscall", "unsafe", "io/fs", "runtime",
	"google.golang.org/grpc", "github.com/dgraph-io/badger", "github.com/tikv/client-go",
	"github.com/axon-kv/axon/storage", "github.com/axon-kv/axon/server", "github.com/axon-kv/axon/sim",
}

func isForbidden(path string) bool {
	for _, f := range forbidden {
		if path == f || strings.HasPrefix(path, f+"/") {
			return true
		}
	}
	return strings.HasPrefix(path, "net/")
}

// TestCoreImportsArePure asks the go tool for the direct imports of every
// core package.
func TestCoreImportsArePure(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "github.com/axon-kv/axon/core/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Fields(imports) {
			if isForbidden(imp) {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}

var clockOrGoroutine = regexp.MustCompile(`\btime\.(Now|Sleep|After|AfterFunc|NewTimer|NewTicker|Tick|Since|Until)\b|^\s*go\s+[\w(]`)

// TestCoreReadsNoClockAndStartsNoGoroutine scans the non-test sources of
// every core package (core/auth included).
func TestCoreReadsNoClockAndStartsNoGoroutine(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{$d := .Dir}}{{range .GoFiles}}{{$d}}{{"\t"}}{{.}}{{"\n"}}{{end}}`, "github.com/axon-kv/axon/core/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		dir, file, _ := strings.Cut(line, "\t")
		name := filepath.Join(filepath.Base(dir), file)
		src, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if isForbidden(p) {
				t.Errorf("%s imports %s", name, p)
			}
		}
		for i, line := range strings.Split(string(src), "\n") {
			if clockOrGoroutine.MatchString(line) {
				t.Errorf("%s:%d: %s", name, i+1, strings.TrimSpace(line))
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no core sources found")
	}
}
