/* demo_writer.c: the bundled demo at this stage: a small multi-threaded program that records
 * Start/Stop events of "requests" through the runtime's nettrace writer, so `make demo` shows a
 * real trace end to end (written, verified, dumped). The shim turns this into the LD_PRELOAD demo. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "trace.h"

static at_event_type *start_t, *stop_t;

static void *worker(void *arg)
{
    unsigned w = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < 5; i++) {
        uint8_t buf[256];
        at_payload pl;
        uint64_t id = (uint64_t)w * 100 + i;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_u64(&pl, id);
        at_payload_str(&pl, "/item/42", 64);
        at_event_write(start_t, NULL, NULL, buf, (uint32_t)(pl.p - buf), NULL, 0);
        usleep(1000 + 500 * i); /* the "work" */
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_u64(&pl, id);
        at_payload_i32(&pl, 200);
        at_event_write(stop_t, NULL, NULL, buf, (uint32_t)(pl.p - buf), NULL, 0);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *out = argc > 1 ? argv[1] : "demo.nettrace";
    static const at_field sf[] = {{"RequestId", NT_TYPE_UINT64}, {"Url", NT_TYPE_STRING}};
    static const at_field tf[] = {{"RequestId", NT_TYPE_UINT64}, {"Status", NT_TYPE_INT32}};
    at_event_desc s = {.provider = "acttrace-demo", .name = "RequestStart", .level = NT_LEVEL_INFO,
                       .opcode = NT_OPCODE_START, .nfields = 2, .fields = sf};
    at_event_desc t = {.provider = "acttrace-demo", .name = "RequestStop", .level = NT_LEVEL_INFO,
                       .opcode = NT_OPCODE_STOP, .nfields = 2, .fields = tf};
    start_t = at_event_type_register(&s);
    stop_t = at_event_type_register(&t);
    at_trace_options o = {.path = out};
    char err[256];
    if (!start_t || !stop_t || at_trace_start(&o, err, sizeof err) != 0) {
        fprintf(stderr, "demo: %s\n", err);
        return 1;
    }
    pthread_t th[3];
    for (unsigned i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (unsigned i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    at_trace_stop();
    at_trace_stats st;
    at_trace_get_stats(&st);
    printf("demo: wrote %s: %llu events, %llu dropped\n", at_trace_path() ? at_trace_path() : out,
           (unsigned long long)st.events_written, (unsigned long long)st.events_dropped);
    return 0;
}
