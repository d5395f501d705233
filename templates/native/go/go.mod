module swan.local/{{name}}

go 1.24
