// Command exports counts the exported top-level identifiers (functions,
// types, variables, constants) and the exported methods (of exported
// types) in the non-test Go files of each package directory given:
//
//	go run ./scripts/exports dir...
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

// allRecv (ALL_RECV=1) counts the exported methods of unexported types too.
var allRecv = os.Getenv("ALL_RECV") == "1"

func main() {
	var idents, methods int
	for _, dir := range os.Args[1:] {
		i, m, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Printf("%-28s %4d identifiers %4d methods\n", dir, i, m)
		idents, methods = idents+i, methods+m
	}
	fmt.Printf("%-28s %4d identifiers %4d methods\n", "total", idents, methods)
}

func count(dir string) (idents, methods int, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return 0, 0, err
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return 0, 0, err
		}
		if f.Name.Name == "main" {
			continue
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					idents++
				} else if allRecv || recvExported(d.Recv.List[0].Type) {
					methods++
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							idents++
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								idents++
							}
						}
					}
				}
			}
		}
	}
	return idents, methods, nil
}

func recvExported(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}
