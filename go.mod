module github.com/ncclwatch/watchdog

go 1.26
