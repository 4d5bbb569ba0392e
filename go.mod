module github.com/openatf/atf

go 1.26.8
