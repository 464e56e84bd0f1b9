// chain.cc: C++ frames for the demangling test (see README.md).
namespace acttrace_test {

template <typename T> __attribute__((noinline)) void relay(T depth, void (*cb)())
{
    cb();
    __asm__ volatile("" ::: "memory");
    (void)depth;
}

struct Walker {
    static void deep(int n, void (*cb)());
};

__attribute__((noinline)) void Walker::deep(int n, void (*cb)())
{
    relay<int>(n, cb);
    __asm__ volatile("" ::: "memory");
}

} // namespace acttrace_test

extern "C" __attribute__((visibility("default"))) void stk_cxx_entry(void (*cb)())
{
    acttrace_test::Walker::deep(1, cb);
    __asm__ volatile("" ::: "memory");
}
