module github.com/nfsrdma/nfsrdma

go 1.26

require (
	github.com/go-git/go-billy/v5 v5.9.2
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/willscott/go-nfs v0.0.4
	github.com/willscott/go-nfs-client v0.0.0-20251022144359-801f10d98886
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.46.0
)

require (
	github.com/cyphar/filepath-securejoin v0.6.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/rasky/go-xdr v0.0.0-20170124162913-1a41d1a06c93 // indirect
)
