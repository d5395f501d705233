module swan.example/hello-go

go 1.24
