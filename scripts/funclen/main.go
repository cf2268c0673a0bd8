// Command funclen lists the functions of non-test Go files longer than a
// bound (default 60 lines, from "func" to the closing brace):
//
//	go run ./scripts/funclen [-max 60] dir...
//
// Each dir is walked; testdata and vendor directories are skipped.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	maxLines := flag.Int("max", 60, "longest allowed function, in lines")
	flag.Parse()
	fset := token.NewFileSet()
	found := 0
	for _, root := range flag.Args() {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
					n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
					if n > *maxLines {
						found++
						fmt.Printf("%s:%d: %s: %d lines\n", path, fset.Position(fn.Pos()).Line, fn.Name.Name, n)
					}
				}
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	fmt.Printf("%d functions over %d lines\n", found, *maxLines)
}
