module linger

go 1.26.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	golang.org/x/sys v0.50.0
)

require (
	github.com/chzyer/readline v1.5.1 // indirect
	github.com/google/pprof v0.0.0-20261105003125-4bf881d7fb0b // indirect
	github.com/ianlancetaylor/demangle v0.0.0-20250417193237-f615e6bd150b // indirect
)
