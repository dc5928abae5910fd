module linger

go 1.26.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	golang.org/x/sys v0.50.0
)
