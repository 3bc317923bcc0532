// Command example is a device built on the devmsg device SDK: it prints
// the messages and desired properties it receives, reports a property
// every ten seconds, with -telemetry publishes its uptime as telemetry,
// and reconnects by itself.
//
//	go run ./sdk/device/example -broker tcp://localhost:1883 \
//	    -app APP_KEY -device sensor-0001 -secret DEVICE_SECRET -telemetry 5s
package main
