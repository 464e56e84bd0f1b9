// atclrsym: checks files written with ACTTRACE_SYMBOLS=methods with TraceEvent itself.
//   atclrsym --acttrace PATH FILE...
// For each file:
//  - TraceLog names every frame acttrace names, from the file's Microsoft-Windows-DotNETRuntime
//    ModuleLoad and MethodLoadVerbose events, as `acttrace dump --frame-names` does: the same
//    module, and the function as TraceLog joins Namespace "." Name (acttrace writes an empty
//    namespace, so TraceEvent's name is "." + acttrace's); it names no address acttrace leaves
//    unnamed, and at least one frame is named;
//  - the file has no Universal.System event and has events with stacks, which is what makes PerfView
//    offer "Thread Time (with StartStop Activities)" (EventPipePerfViewData.OpenImpl); the method
//    events are there.
// Prints "PASS file: ..." or "FAIL file: ..." per file, then "N passed, N failed"; exit code 1 on a
// failure.
//   atclrsym --view FILE
// prints the activity view's samples as "view<TAB>thread<TAB>activity<TAB>ms" lines: the time they
// stand for (their metric), per thread (its "Thread (N)" frame) and innermost activity frame ("-"
// for none).
using System.Diagnostics;
using Microsoft.Diagnostics.Symbols;
using Microsoft.Diagnostics.Tracing;
using Microsoft.Diagnostics.Tracing.Etlx;
using Microsoft.Diagnostics.Tracing.Stacks;

static class Program
{
    static int Main(string[] args)
    {
        string acttrace = "acttrace";
        if (args.Length == 2 && args[0] == "--view")
            return View(args[1]);
        var files = new List<string>();
        for (int i = 0; i < args.Length; i++)
        {
            if (args[i] == "--acttrace" && i + 1 < args.Length) acttrace = args[++i];
            else files.Add(args[i]);
        }
        if (files.Count == 0)
        {
            Console.Error.WriteLine("usage: atclrsym --acttrace PATH FILE...");
            return 2;
        }
        int passed = 0, failed = 0;
        foreach (var f in files)
        {
            var problems = new List<string>();
            string summary = "";
            try { summary = Check(f, acttrace, problems); }
            catch (Exception e) { problems.Add($"exception: {e.GetType().Name}: {e.Message}"); }
            if (problems.Count == 0)
            {
                Console.WriteLine($"PASS {f}: {summary}");
                passed++;
            }
            else
            {
                Console.WriteLine($"FAIL {f}:");
                foreach (var p in problems.Take(20)) Console.WriteLine($"  {p}");
                if (problems.Count > 20) Console.WriteLine($"  ... {problems.Count - 20} more");
                failed++;
            }
        }
        Console.WriteLine($"{passed} passed, {failed} failed");
        return failed == 0 ? 0 : 1;
    }

    // address -> "module!function" (or "?", "module+0x..") as `acttrace dump --frame-names` says
    static Dictionary<ulong, string> OurFrames(string acttrace, string path)
    {
        var psi = new ProcessStartInfo(acttrace) { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in new[] { "dump", "--frame-names", path }) psi.ArgumentList.Add(a);
        using var p = Process.Start(psi)!;
        var err = p.StandardError.ReadToEndAsync();
        string outText = p.StandardOutput.ReadToEnd();
        p.WaitForExit();
        if (p.ExitCode != 0) throw new Exception($"acttrace dump --frame-names failed: {err.Result}");
        var d = new Dictionary<ulong, string>();
        foreach (var line in outText.Split('\n'))
        {
            var f = line.Split('\t');
            if (f.Length >= 3 && f[0] == "frame")
                d[Convert.ToUInt64(f[1], 16)] = f[2];
        }
        return d;
    }

    // PerfView's "Thread Time (with StartStop Activities)" for an EventPipe file: the samples whose
    // stack holds an activity frame above a frame named from the method events.
    static int ActivityViewFrames(TraceLog tl)
    {
        var src = new MutableTraceEventStackSource(tl);
        var comp = new SampleProfilerThreadTimeComputer(tl, new SymbolReader(TextWriter.Null))
        {
            GroupByStartStopActivity = true,
            IncludeEventSourceEvents = true,
        };
        comp.GenerateThreadTimeStacks(src);
        int n = 0;
        src.ForEach(sample =>
        {
            bool activity = false, namedBelow = false;
            for (var si = sample.StackIndex; si != StackSourceCallStackIndex.Invalid; si = src.GetCallerIndex(si))
            {
                string f = src.GetFrameName(src.GetFrameIndex(si), false);
                if (f.StartsWith("Activity ")) activity = true;
                else if (!activity && f.Contains("!.")) namedBelow = true;
            }
            if (activity && namedBelow) n++;
            if (Environment.GetEnvironmentVariable("AT_PRINT") != null && n == 1 && activity && namedBelow)
                for (var si = sample.StackIndex; si != StackSourceCallStackIndex.Invalid; si = src.GetCallerIndex(si))
                    Console.WriteLine("  frame " + src.GetFrameName(src.GetFrameIndex(si), false));
        });
        return n;
    }

    static int View(string path)
    {
        string etlx = Path.Combine(Path.GetTempPath(), $"atclrsym-{Environment.ProcessId}-{Path.GetFileName(path)}.etlx");
        TraceLog.CreateFromEventPipeDataFile(path, etlx);
        try
        {
            using var tl = new TraceLog(etlx);
            var src = new MutableTraceEventStackSource(tl);
            var comp = new SampleProfilerThreadTimeComputer(tl, new SymbolReader(TextWriter.Null))
            {
                GroupByStartStopActivity = true,
                IncludeEventSourceEvents = false,
            };
            comp.GenerateThreadTimeStacks(src);
            var counts = new SortedDictionary<string, double>(StringComparer.Ordinal);
            src.ForEach(sample =>
            {
                string thread = "-", activity = null;
                for (var si = sample.StackIndex; si != StackSourceCallStackIndex.Invalid; si = src.GetCallerIndex(si))
                {
                    string f = src.GetFrameName(src.GetFrameIndex(si), false);
                    if (f.StartsWith("Thread (")) thread = f;
                    else if (activity == null && f.StartsWith("Activity ")) activity = f;
                }
                string key = thread + "\t" + (activity ?? "-");
                counts[key] = counts.GetValueOrDefault(key) + sample.Metric;
            });
            foreach (var (k, n) in counts) Console.WriteLine($"view\t{k}\t{n:F1}");
            return 0;
        }
        finally
        {
            File.Delete(etlx);
        }
    }

    static string Check(string path, string acttrace, List<string> problems)
    {
        var ours = OurFrames(acttrace, path);
        string etlx = Path.Combine(Path.GetTempPath(), $"atclrsym-{Environment.ProcessId}-{Path.GetFileName(path)}.etlx");
        TraceLog.CreateFromEventPipeDataFile(path, etlx);
        try
        {
            using var tl = new TraceLog(etlx);
            bool universal = false, anyStacks = false;
            long methods = 0, modules = 0;
            foreach (var s in tl.Stats)
            {
                if (s.StackCount > 0) anyStacks = true;
                if (s.ProviderName == "Universal.System") universal = true;
                if (s.ProviderName == "Microsoft-Windows-DotNETRuntime" && s.EventName == "Method/LoadVerbose") methods += s.Count;
                if (s.ProviderName == "Microsoft-Windows-DotNETRuntime" && s.EventName == "Loader/ModuleLoad") modules += s.Count;
            }
            if (universal) problems.Add("the file has Universal.System events: PerfView drops the activity view");
            if (!anyStacks) problems.Add("no event with a stack: PerfView offers no stack view");
            if (methods == 0 || modules == 0) problems.Add($"{modules} ModuleLoad and {methods} MethodLoadVerbose events");

            var ca = tl.CodeAddresses;
            var seen = new HashSet<ulong>();
            int named = 0;
            for (int i = 0; i < ca.Count; i++)
            {
                var idx = (CodeAddressIndex)i;
                ulong addr = ca.Address(idx);
                seen.Add(addr);
                string our = ours.GetValueOrDefault(addr, "(not in acttrace's stacks)");
                int bang = our.IndexOf('!');
                var mi = ca.MethodIndex(idx);
                if (mi == MethodIndex.Invalid)
                {
                    if (bang >= 0) problems.Add($"0x{addr:x}: acttrace {our}, TraceEvent unnamed");
                    continue;
                }
                var mf = ca.ModuleFile(idx);
                if (mf == null)
                {
                    var mfi = ca.Methods.MethodModuleFileIndex(mi);
                    mf = mfi != ModuleFileIndex.Invalid ? tl.ModuleFiles[mfi] : null;
                }
                string teMod = mf != null ? Path.GetFileName(mf.FilePath) : "UNKNOWN";
                string teFn = ca.Methods.FullMethodName(mi);
                if (bang < 0)
                {
                    problems.Add($"0x{addr:x}: acttrace {our}, TraceEvent {teMod}!{teFn}");
                    continue;
                }
                string ourMod = our.Substring(0, bang), ourFn = our.Substring(bang + 1);
                if (!string.Equals(teMod, ourMod, StringComparison.OrdinalIgnoreCase) || teFn != "." + ourFn)
                {
                    problems.Add($"0x{addr:x}: acttrace {our}, TraceEvent {teMod}!{teFn}");
                    continue;
                }
                named++;
            }
            foreach (var (addr, our) in ours)
                if (!seen.Contains(addr) && our.Contains('!'))
                    problems.Add($"0x{addr:x}: acttrace {our}, not in TraceEvent's stacks");
            if (named == 0) problems.Add("TraceEvent named no frame");
            int inActivity = ActivityViewFrames(tl);
            if (inActivity == 0) problems.Add("the activity view has no named frame under an activity");
            return $"{named} named frames agree, {inActivity} samples with named frames under activities in the activity view, {modules} ModuleLoad, {methods} MethodLoadVerbose, no Universal.System: activity view offered";
        }
        finally
        {
            File.Delete(etlx);
        }
    }
}
