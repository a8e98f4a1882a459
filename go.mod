module github.com/nfsrdma/nfsrdma

go 1.26

require (
	github.com/go-git/go-billy/v5 v5.9.2
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/willscott/go-nfs v0.0.4
	github.com/willscott/go-nfs-client v0.0.0-20251022144359-801f10d98886
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.46.0
	gonum.org/v1/plot v0.17.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/cyphar/filepath-securejoin v0.6.1 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/rasky/go-xdr v0.0.0-20170124162913-1a41d1a06c93 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/text v0.39.0 // indirect
)
