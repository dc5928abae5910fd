package web

//go:generate go tool templ generate
