module linger

go 1.26
