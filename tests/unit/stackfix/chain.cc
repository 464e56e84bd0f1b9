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

// C++ exceptions still work in a process that loaded libunwind (RTLD_LOCAL): 0 when caught.
extern "C" __attribute__((visibility("default"))) int stk_cxx_throw_catch(int v)
{
    try {
        if (v >= 0)
            throw v + 1;
    } catch (int x) {
        return x == v + 1 ? 0 : 2;
    }
    return 1;
}
