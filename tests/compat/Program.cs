// atcompat: checks trace files with TraceEvent, the reader PerfView and dotnet-trace are built on.
// One line per file (PASS, FAIL or SKIP and why), a closing "N passed, N failed" line, and a non-zero
// exit status on any failure.
//
//   atcompat [--acttrace PATH] [--read-only] FILE|DIR...
//
// Per file written by acttrace:
//  - EventPipeEventSource reads every event without an exception, and the count per provider and
//    event id equals `acttrace dump --counts`;
//  - TraceLog converts the file with no "events out of order" warning in its conversion log, and its
//    lost events equal acttrace's;
//  - every stack address TraceLog names through the file's Universal.System events has the same
//    module and function in `acttrace dump --frame-names`, and every address acttrace names is named
//    by TraceLog too; an address no function covers has the same module in both (or none in both);
//  - the events per ProcessorNumber equal `acttrace dump --counts`'s per capture processor: the CPU
//    the event was recorded on (TraceEvent keeps its low byte); the writer's own events carry none
//    (0xFFFFFFFF), which TraceEvent takes as unknown and shows as 0, its only value for it;
//  - TraceEvent's StartStopActivityComputer, run over TraceLog's events, finds the activities of
//    `acttrace tree --tsv`, matched by process, ActivityId and start order: each with the same name
//    (TraceEvent's TaskName: the event name less Start/Stop), the same path (TraceEvent's
//    ActivityPathString against acttrace's rendering of the id in PerfView's notation, "/#pid/1/5/",
//    whose decoder reads some multi-byte numbers otherwise than the runtime's encoder wrote them),
//    the same start and duration to the microsecond, the same parent, and nothing paired on one side
//    only. Where TraceEvent's rules differ from acttrace's by design, the checker derives what
//    TraceEvent must show from acttrace's output by TraceEvent's rule, exactly:
//     . it tracks only ActivityIds in the ActivityPath form of the writing process (others are left
//       out on acttrace's side);
//     . a Stop ends the latest-started activity of its ActivityId whatever its name, where acttrace
//       (as EventSource) lets a Stop of another name leave the activity running (tree --tsv lists
//       such Stops);
//     . a Start's creator is the activity its RelatedActivityId names while that one runs (then
//       acttrace's parent must be the same); without one, it is the Start thread's current start-stop
//       activity: the last one started on that
//       thread, or after a Stop on the thread the stopped one's creator, a stopped one standing for
//       its nearest running creator. acttrace takes the parent from the id's path, so a root started
//       on a thread that left another activity still running (acttrace_enter(NULL), a callback
//       that is not inside it) is that one's child in TraceEvent;
//     . acttrace's tree is at most 1000 deep (AM_MAX_DEPTH): a deeper activity is a root there and
//       its creator's child in TraceEvent.
// Files after --read-only (written by others, such as the .NET runtime) are only read and converted.
// A file acttrace itself reports damaged (a test's torn or cut file) or `acttrace verify` rejects (a
// test's deliberately unsound file: events before the sync time or out of order) is skipped, and
// counted.
using System.Diagnostics;
using System.Text;
using Microsoft.Diagnostics.Tracing;
using Microsoft.Diagnostics.Tracing.Etlx;

static class Program
{
    const int MaxShown = 4; // mismatches named per file; the count says how many there were
    const int MaxDepth = 1000; // acttrace's tree depth (tools/actmodel.h AM_MAX_DEPTH): deeper ones become roots

    static int Main(string[] args)
    {
        string acttrace = "acttrace";
        bool readOnly = false;
        var files = new List<(string path, bool readOnly)>();
        for (int i = 0; i < args.Length; i++)
        {
            if (args[i] == "--acttrace" && i + 1 < args.Length) acttrace = args[++i];
            else if (args[i] == "--read-only") readOnly = true;
            else if (Directory.Exists(args[i]))
                foreach (var f in Directory.GetFiles(args[i], "*.nettrace", SearchOption.AllDirectories).OrderBy(f => f, StringComparer.Ordinal))
                    files.Add((f, readOnly));
            else files.Add((args[i], readOnly));
        }
        if (files.Count == 0)
        {
            Console.Error.WriteLine("usage: atcompat [--acttrace PATH] [--read-only] FILE|DIR...");
            return 2;
        }
        string version = typeof(TraceLog).Assembly.GetName().Version?.ToString() ?? "?";
        int passed = 0, failed = 0, skipped = 0, frames = 0;
        var watch = Stopwatch.StartNew();
        foreach (var (path, ro) in files)
        {
            Result r;
            try { r = Check(path, ro, acttrace); }
            catch (Exception e) { r = Result.Fail($"checker: {e.GetType().Name}: {e.Message}"); }
            frames += r.Frames;
            switch (r.Kind)
            {
                case 'P': passed++; Console.WriteLine($"PASS {path}: {r.Text}"); break;
                case 'S': skipped++; Console.WriteLine($"SKIP {path}: {r.Text}"); break;
                default: failed++; Console.WriteLine($"FAIL {path}: {r.Text}"); break;
            }
        }
        Console.WriteLine($"TraceEvent {version}: {files.Count} files, {frames} named frames compared, {skipped} skipped (damaged), {watch.Elapsed.TotalSeconds:F1} s");
        Console.WriteLine($"{passed} passed, {failed} failed");
        return failed > 0 ? 1 : 0;
    }

    sealed class Result
    {
        public char Kind;
        public string Text = "";
        public int Frames;
        public static Result Fail(string t) => new Result { Kind = 'F', Text = t };
        public static Result Skip(string t) => new Result { Kind = 'S', Text = t };
    }

    // What `acttrace dump --counts --frame-names` says about the file.
    sealed class Ours
    {
        public Dictionary<(Guid, int), long> Counts = new();
        public Dictionary<(Guid, int), string> Names = new();
        public Dictionary<ulong, string> Frames = new();
        public long Lost, LostFirst;
        public List<(int, long)> Cpus = new(); // capture processor (-1: none) and its events
        public int Status;
        public string Err = "";
    }

    static Ours RunActtrace(string acttrace, string path)
    {
        var psi = new ProcessStartInfo(acttrace)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (var a in new[] { "dump", "--counts", "--frame-names", path }) psi.ArgumentList.Add(a);
        using var p = Process.Start(psi) ?? throw new InvalidOperationException($"cannot run {acttrace}");
        var errTask = p.StandardError.ReadToEndAsync();
        var o = new Ours();
        string? line;
        while ((line = p.StandardOutput.ReadLine()) != null)
        {
            var f = line.Split('\t');
            if (f[0] == "count" && f.Length >= 6)
            {
                var key = (Guid.Parse(f[1]), int.Parse(f[3]));
                o.Counts[key] = long.Parse(f[4]);
                o.Names[key] = $"{f[2]}/{f[5]}";
            }
            else if (f[0] == "cpu" && f.Length >= 3)
                o.Cpus.Add((f[1] == "none" ? -1 : (int)uint.Parse(f[1]), long.Parse(f[2])));
            else if (f[0] == "frame" && f.Length >= 3)
                o.Frames[Convert.ToUInt64(f[1], 16)] = f[2];
            else if (line.StartsWith("  events lost "))
                o.Lost = long.Parse(line.Substring("  events lost ".Length));
            else if (f[0] == "lost-before-first" && f.Length >= 2)
                o.LostFirst = long.Parse(f[1]);
        }
        p.WaitForExit();
        o.Status = p.ExitCode;
        o.Err = errTask.Result.Trim();
        return o;
    }

    // Exit status and the output of `acttrace CMD PATH` (stdout, then stderr).
    static (int, string) RunTool(string acttrace, string cmd, string path)
    {
        var psi = new ProcessStartInfo(acttrace)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        psi.ArgumentList.Add(cmd);
        psi.ArgumentList.Add(path);
        using var p = Process.Start(psi) ?? throw new InvalidOperationException($"cannot run {acttrace}");
        var err = p.StandardError.ReadToEndAsync();
        string o = p.StandardOutput.ReadToEnd();
        p.WaitForExit();
        return (p.ExitCode, (o + err.Result).Trim());
    }

    static Result Check(string path, bool readOnly, string acttrace)
    {
        Ours? ours = null;
        if (!readOnly)
        {
            ours = RunActtrace(acttrace, path);
            if (ours.Status != 0)
                return Result.Skip($"acttrace dump exits {ours.Status}: {FirstLine(ours.Err)}");
            var (vs, vout) = RunTool(acttrace, "verify", path);
            if (vs != 0)
                return Result.Skip($"acttrace verify exits {vs}: {FirstLine(vout)}");
        }

        // 1. every event, through the plain event source
        var counts = new Dictionary<(Guid, int), long>(); // by provider GUID: names need a parser
        var procs = new Dictionary<int, long>();
        int nprocs = 0;
        long sourceLost;
        try
        {
            using var src = new EventPipeEventSource(path);
            src.AllEvents += e =>
            {
                var key = (e.ProviderGuid, (int)e.ID);
                counts[key] = counts.GetValueOrDefault(key) + 1;
                procs[e.ProcessorNumber] = procs.GetValueOrDefault(e.ProcessorNumber) + 1;
            };
            src.Process();
            nprocs = src.NumberOfProcessors;
            sourceLost = src.EventsLost;
        }
        catch (Exception e)
        {
            return Result.Fail($"EventPipeEventSource: {e.GetType().Name}: {FirstLine(e.Message)}");
        }
        var problems = new List<string>();
        // the capture processor of each event: TraceEvent keeps its low byte, and shows an unknown one
        // (0xFFFFFFFF, the writer's own events) as 0, its only value for it
        if (ours != null)
        {
            var want = new Dictionary<int, long>();
            foreach (var (cpu, n) in ours.Cpus)
            {
                int k = cpu < 0 ? 0 : cpu & 0xFF;
                want[k] = want.GetValueOrDefault(k) + n;
            }
            foreach (var k in want.Keys.Union(procs.Keys).OrderBy(k => k))
                if (want.GetValueOrDefault(k) != procs.GetValueOrDefault(k))
                    problems.Add($"events on processor {k}: acttrace {want.GetValueOrDefault(k)}, TraceEvent {procs.GetValueOrDefault(k)}");
        }
        if (ours != null)
        {
            foreach (var k in ours.Counts.Keys.Union(counts.Keys).OrderBy(k => k.Item1).ThenBy(k => k.Item2))
            {
                long a = ours.Counts.GetValueOrDefault(k), t = counts.GetValueOrDefault(k);
                if (a != t)
                    problems.Add($"{ours.Names.GetValueOrDefault(k, $"{k.Item1}/event {k.Item2}")}: acttrace {a}, TraceEvent {t}");
            }
        }

        // 2. TraceLog's conversion, its log captured
        string etlx = Path.Combine(Path.GetTempPath(), $"atcompat-{Environment.ProcessId}-{Guid.NewGuid():N}.etlx");
        var log = new StringWriter();
        int named = 0, acts = 0;
        try
        {
            try
            {
                TraceLog.CreateFromEventPipeDataFile(path, etlx, new TraceLogOptions { ConversionLog = log });
            }
            catch (Exception e)
            {
                return Result.Fail($"TraceLog conversion: {e.GetType().Name}: {FirstLine(e.Message)}");
            }
            foreach (var l in log.ToString().Split('\n'))
                if (l.Contains("out of order", StringComparison.OrdinalIgnoreCase))
                {
                    problems.Add($"TraceLog: {l.Trim()}");
                    break;
                }
            using var tl = new TraceLog(etlx);
            // A V5 reader counts no drop before a thread's first event in the file (it takes a last
            // number of 0 for a recycled thread id): those are the known difference.
            if (ours != null && tl.EventsLost != ours.Lost - ours.LostFirst)
                problems.Add($"lost events: acttrace {ours.Lost} ({ours.LostFirst} before a thread's first event), TraceLog {tl.EventsLost} (event source {sourceLost})");
            if (ours != null)
            {
                named = CompareFrames(tl, ours, problems);
                acts = CompareActivities(tl, RunTree(acttrace, path), problems);
            }
        }
        finally
        {
            try { File.Delete(etlx); } catch (IOException) { }
        }
        if (problems.Count > 0)
        {
            var sb = new StringBuilder();
            sb.Append($"{problems.Count} disagreement(s): ");
            sb.Append(string.Join("; ", problems.Take(MaxShown)));
            if (problems.Count > MaxShown) sb.Append("; ...");
            return new Result { Kind = 'F', Text = sb.ToString(), Frames = named };
        }
        long total = counts.Values.Sum();
        string unseen = ours != null && ours.LostFirst > 0 ? $"; {ours.LostFirst} lost events TraceEvent cannot see (before a thread's first event)" : "";
        return new Result
        {
            Kind = 'P',
            Frames = named,
            Text = readOnly ? $"{total} events read, converted" : $"{total} events, {named} named frames agree, {acts} activities agree{unseen}",
        };
    }

    // TraceLog's name of every code address of the file against acttrace's; returns the number of
    // addresses both name.
    static int CompareFrames(TraceLog tl, Ours ours, List<string> problems)
    {
        var ca = tl.CodeAddresses;
        var seen = new HashSet<ulong>();
        int named = 0;
        for (int i = 0; i < ca.Count; i++)
        {
            var idx = (CodeAddressIndex)i;
            ulong addr = ca.Address(idx);
            seen.Add(addr);
            var mi = ca.MethodIndex(idx);
            string? te = null;
            if (mi != MethodIndex.Invalid)
            {
                var mf = ca.ModuleFile(idx);
                if (mf == null)
                {
                    var mfi = ca.Methods.MethodModuleFileIndex(mi);
                    mf = mfi != ModuleFileIndex.Invalid ? tl.ModuleFiles[mfi] : null;
                }
                te = $"{(mf != null ? Path.GetFileName(mf.FilePath) : "UNKNOWN")}!{ca.Methods.FullMethodName(mi)}";
            }
            string our = ours.Frames.GetValueOrDefault(addr, "(not in acttrace's stacks)");
            bool ourNamed = our.Contains('!');
            if (te == null && !ourNamed)
            {
                // no function: the module alone (a mapping's first and last bytes are where an
                // inclusive or exclusive end is read otherwise)
                var mf0 = ca.ModuleFile(idx);
                string? teMod = mf0 != null ? Path.GetFileName(mf0.FilePath) : null;
                int plus = our.IndexOf('+');
                string? ourMod = plus > 0 ? our.Substring(0, plus) : null;
                if (ours.Frames.ContainsKey(addr) && !string.Equals(teMod, ourMod, StringComparison.OrdinalIgnoreCase))
                    problems.Add($"0x{addr:x}: acttrace module {ourMod ?? "none"} ({our}), TraceEvent module {teMod ?? "none"}");
                continue;
            }
            if (te != null && SameFrame(te, our)) { named++; continue; }
            problems.Add($"0x{addr:x}: acttrace {our}, TraceEvent {te ?? "unnamed"}");
        }
        foreach (var (addr, our) in ours.Frames)
            if (!seen.Contains(addr) && our.Contains('!'))
                problems.Add($"0x{addr:x}: acttrace {our}, not in TraceEvent's stacks");
        return named;
    }

    // module!function alike; TraceEvent keeps module file names in lower case
    static bool SameFrame(string te, string our)
    {
        int a = te.IndexOf('!'), b = our.IndexOf('!');
        return a >= 0 && b >= 0 && string.Equals(te.Substring(0, a), our.Substring(0, b), StringComparison.OrdinalIgnoreCase)
               && te.Substring(a) == our.Substring(b);
    }

    // One activity of `acttrace tree --tsv`.
    sealed class OurAct
    {
        public ulong Serial, Parent;
        public int Pid;
        public ulong StartTid, StopTid; // StopTid 0: never stopped
        public string Name = "", Path = "", PvPath = "";
        public long StartNs, DurNs; // DurNs -1: never stopped
        public Guid Id;
        public Guid Related;        // its Start's RelatedActivityId (empty: none)
        public long TeStopNs = -1;  // where TraceEvent's pairing stops it (-1: never)
        public ulong TeStopTid;
    }

    // A Stop that acttrace paired with no activity (another name than its id's activity).
    sealed class OurStop
    {
        public int Pid;
        public ulong Tid;
        public string Name = "";
        public long Ns;
        public Guid Id;
    }

    static (List<OurAct>, List<OurStop>) RunTree(string acttrace, string path)
    {
        var psi = new ProcessStartInfo(acttrace)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (var a in new[] { "tree", "--tsv", path }) psi.ArgumentList.Add(a);
        using var p = Process.Start(psi) ?? throw new InvalidOperationException($"cannot run {acttrace}");
        var errTask = p.StandardError.ReadToEndAsync();
        var list = new List<OurAct>();
        var stops = new List<OurStop>();
        var related = new Dictionary<ulong, Guid>();
        string? line;
        while ((line = p.StandardOutput.ReadLine()) != null)
        {
            var f = line.Split('\t');
            if (f[0] == "related" && f.Length >= 3)
                related[ulong.Parse(f[1])] = Guid.Parse(f[2]);
            if (f[0] == "stop" && f.Length >= 6)
                stops.Add(new OurStop { Pid = (int)uint.Parse(f[1]), Tid = ulong.Parse(f[2]), Name = f[3], Ns = long.Parse(f[4]), Id = Guid.Parse(f[5]) });
            if (f[0] != "activity" || f.Length < 12) continue;
            list.Add(new OurAct
            {
                Serial = ulong.Parse(f[1]),
                Parent = ulong.Parse(f[2]),
                Pid = (int)uint.Parse(f[3]),
                StartTid = ulong.Parse(f[4]),
                StopTid = ulong.Parse(f[5]),
                Name = f[6],
                Path = f[7],
                StartNs = long.Parse(f[8]),
                DurNs = long.Parse(f[9]),
                Id = Guid.Parse(f[10]),
                PvPath = f[11],
            });
        }
        p.WaitForExit();
        if (p.ExitCode != 0) throw new InvalidOperationException($"acttrace tree --tsv exits {p.ExitCode}: {FirstLine(errTask.Result.Trim())}");
        foreach (var o in list) o.Related = related.GetValueOrDefault(o.Serial);
        return (list, stops);
    }

    // The creator TraceEvent gives each activity, from acttrace's pairing: the running activity the
    // Start's RelatedActivityId names (the latest started of that id, or after its Stop its creator
    // when that one has the same id), else the Start thread's current start-stop activity (see the header: the last activity started on the
    // thread, or after a Stop on the thread the stopped one's creator; a stopped one stands for its
    // nearest running creator). Serial -> expected creator's serial (0: none).
    static Dictionary<ulong, ulong> ExpectedCreators(List<OurAct> mine, Dictionary<ulong, OurAct> bySerial)
    {
        var evs = new List<(long t, int kind, OurAct a)>(); // kind 0 stop, 1 start: a Stop at the same ns came first
        foreach (var o in mine)
        {
            evs.Add((o.StartNs, 1, o));
            if (o.TeStopNs >= 0) evs.Add((o.TeStopNs, 0, o));
        }
        evs.Sort((x, y) => x.t != y.t ? x.t.CompareTo(y.t) : x.kind != y.kind ? x.kind.CompareTo(y.kind) : x.a.Serial.CompareTo(y.a.Serial));
        var creator = new Dictionary<ulong, ulong>();
        var stopped = new HashSet<ulong>();
        var current = new Dictionary<(int, ulong), ulong>(); // (pid, thread) -> serial
        var live = new Dictionary<(int, Guid), OurAct>();     // TraceEvent's table of running activities
        ulong Running(ulong s)
        {
            while (s != 0 && stopped.Contains(s)) s = creator.GetValueOrDefault(s);
            return s;
        }
        foreach (var (t, kind, a) in evs)
        {
            if (kind == 1)
            {
                ulong c = a.Related != Guid.Empty && live.TryGetValue((a.Pid, a.Related), out var r) ? r.Serial
                        : Running(current.GetValueOrDefault((a.Pid, a.StartTid)));
                creator[a.Serial] = c;
                current[(a.Pid, a.StartTid)] = a.Serial;
                live[(a.Pid, a.Id)] = a;
            }
            else
            {
                stopped.Add(a.Serial);
                current[(a.Pid, a.TeStopTid)] = Running(creator.GetValueOrDefault(a.Serial));
                if (live.TryGetValue((a.Pid, a.Id), out var l) && l == a)
                {
                    // the table goes back to its creator when that one has the same id
                    ulong cs = Running(creator.GetValueOrDefault(a.Serial));
                    if (cs != 0 && bySerial[cs].Id == a.Id && bySerial[cs].Pid == a.Pid) live[(a.Pid, a.Id)] = bySerial[cs];
                    else live.Remove((a.Pid, a.Id));
                }
            }
        }
        return creator;
    }

    // Where TraceEvent's pairing stops each activity: it takes the first Stop of the activity's id
    // (of any name) while the activity is the latest started with that id; acttrace stops it only
    // by a Stop of its own name.
    static void TeStops(List<OurAct> mine, List<OurStop> others)
    {
        var all = new List<(long ns, ulong tid, int pid, Guid id, OurAct? own)>();
        foreach (var o in mine)
            if (o.DurNs >= 0) all.Add((o.StartNs + o.DurNs, o.StopTid, o.Pid, o.Id, o));
        foreach (var s in others) all.Add((s.Ns, s.Tid, s.Pid, s.Id, null));
        var byId = all.GroupBy(x => (x.pid, x.id)).ToDictionary(g => g.Key, g => g.OrderBy(x => x.ns).ToList());
        var starts = mine.GroupBy(o => (o.Pid, o.Id)).ToDictionary(g => g.Key, g => g.OrderBy(o => o.StartNs).ThenBy(o => o.Serial).ToList());
        foreach (var (key, acts) in starts)
        {
            if (!byId.TryGetValue(key, out var st)) continue;
            var used = new HashSet<int>();
            for (int i = 0; i < acts.Count; i++)
            {
                var a = acts[i];
                long next = i + 1 < acts.Count ? acts[i + 1].StartNs : long.MaxValue;
                for (int k = 0; k < st.Count; k++)
                {
                    if (used.Contains(k) || st[k].ns < a.StartNs || st[k].ns > next) continue;
                    // a Stop acttrace paired with another activity of the id is that one's
                    if (st[k].own != null && st[k].own != a && st[k].own.StartNs > a.StartNs) break;
                    used.Add(k);
                    a.TeStopNs = st[k].ns;
                    a.TeStopTid = st[k].tid;
                    break;
                }
            }
        }
    }

    // TraceEvent's path notation "/#pid/1/5/1/" (or "//1/5/1/" for an id without a pid) in ours: "//1/5/1".
    static string TePath(Guid id, int pid)
    {
        string s = StartStopActivityComputer.ActivityPathString(id, pid);
        if (s.StartsWith("/#"))
        {
            int k = s.IndexOf('/', 2);
            s = k < 0 ? s : "/" + s.Substring(k);
        }
        if (s.StartsWith("//") && s.Length > 2 && s.EndsWith("/")) s = s.Substring(0, s.Length - 1);
        return s;
    }

    // TraceEvent's StartStopActivityComputer over TraceLog's events against `acttrace tree --tsv`:
    // the same activities (by process, ActivityId and start order), each with the same name, path,
    // parent, start and duration (to the microsecond). Returns the number of activities that agree.
    static int CompareActivities(TraceLog tl, (List<OurAct>, List<OurStop>) tree, List<string> problems)
    {
        var (ours, ourStops) = tree;
        var src = tl.Events.GetSource();
        var ac = new ActivityComputer(src, new Microsoft.Diagnostics.Symbols.SymbolReader(TextWriter.Null));
        var ssc = new StartStopActivityComputer(src, ac);
        var theirs = new List<StartStopActivity>();
        var stops = new Dictionary<StartStopActivity, double>(ReferenceEqualityComparer.Instance);
        ssc.Start += (a, e) => theirs.Add(a);
        // the Stop that TraceEvent paired with the activity (its duration is set only when the next
        // event is seen, and a zero duration reads as "not stopped")
        ssc.Stop += (a, e) => { if (!stops.ContainsKey(a)) stops[a] = e.TimeStampRelativeMSec; };
        src.Process();

        // TraceEvent pairs only ActivityIds in the ActivityPath form of the writing process
        var mine = ours.Where(o => StartStopActivityComputer.IsActivityPath(o.Id, o.Pid)).ToList();
        var bySerial = ours.ToDictionary(o => o.Serial);
        var ourQ = mine.GroupBy(o => (o.Pid, o.Id)).ToDictionary(g => g.Key, g => new Queue<OurAct>(g.OrderBy(o => o.StartNs).ThenBy(o => o.Serial)));
        var match = new Dictionary<StartStopActivity, OurAct>(ReferenceEqualityComparer.Instance);
        var matched = new HashSet<OurAct>(ReferenceEqualityComparer.Instance);
        var extra = new List<string>();
        foreach (var t in theirs.OrderBy(t => t.StartTimeRelativeMSec).ThenBy(t => (int)t.Index))
        {
            if (ourQ.TryGetValue((t.ProcessID, t.ActivityID), out var q) && q.Count > 0)
            {
                var o = q.Dequeue();
                match[t] = o;
                matched.Add(o);
            }
            else extra.Add($"TraceEvent's {t.TaskName} {TePath(t.ActivityID, t.ProcessID)} at {t.StartTimeRelativeMSec:F3} ms: not an activity of acttrace");
        }
        TeStops(mine, ourStops);
        var expect = ExpectedCreators(mine, bySerial);
        var depths = new Dictionary<ulong, int>();
        int Depth(ulong serial) // in acttrace's tree: 0 for a root
        {
            var chain = new List<ulong>();
            int d = -1;
            for (ulong q = serial; q != 0; q = bySerial.TryGetValue(q, out var qa) ? qa.Parent : 0)
            {
                if (depths.TryGetValue(q, out int k)) { d = k; break; }
                chain.Add(q);
            }
            for (int i = chain.Count - 1; i >= 0; i--) depths[chain[i]] = ++d;
            return depths[serial];
        }
        int agree = 0;
        var bad = new List<string>();
        foreach (var t in theirs)
        {
            if (!match.TryGetValue(t, out var o)) continue;
            var d = new List<string>();
            if (t.TaskName != o.Name) d.Add($"name {t.TaskName}");
            string tp = StartStopActivityComputer.ActivityPathString(t.ActivityID, t.ProcessID);
            if (tp != o.PvPath) d.Add($"path {tp} (acttrace {o.PvPath}, PerfView's notation)");
            double os = o.StartNs / 1e6;
            if (Math.Abs(os - t.StartTimeRelativeMSec) >= 0.001) d.Add($"start {t.StartTimeRelativeMSec:F6} ms (acttrace {os:F6})");
            bool tStopped = stops.TryGetValue(t, out double stopMs);
            long want_ns = o.TeStopNs < 0 ? -1 : o.TeStopNs - o.StartNs;
            string by = o.TeStopNs >= 0 && o.DurNs != want_ns ? $" by a Stop of another name; acttrace's duration {(o.DurNs < 0 ? "never stopped" : $"{o.DurNs / 1e6:F6}")}" : "";
            if (want_ns < 0 && tStopped) d.Add($"stopped after {stopMs - t.StartTimeRelativeMSec:F6} ms (acttrace: never stopped)");
            else if (want_ns >= 0 && !tStopped) d.Add($"never stopped (acttrace: {want_ns / 1e6:F6} ms{by})");
            else if (want_ns >= 0 && Math.Abs(stopMs - t.StartTimeRelativeMSec - want_ns / 1e6) >= 0.001)
                d.Add($"duration {stopMs - t.StartTimeRelativeMSec:F6} ms (acttrace {want_ns / 1e6:F6}{by})");
            string tParent = t.Creator == null ? "none" : match.TryGetValue(t.Creator, out var pc) ? $"#{pc.Serial}" : $"{t.Creator.TaskName} {TePath(t.Creator.ActivityID, t.Creator.ProcessID)} (not acttrace's)";
            ulong want = expect.GetValueOrDefault(o.Serial);
            // a creator its RelatedActivityId names is acttrace's parent too
            if (o.Related != Guid.Empty && want != 0 && bySerial[want].Id == o.Related && o.Parent != want
                && !(o.Parent == 0 && Depth(want) + 1 >= MaxDepth))
                d.Add($"creator #{want} by its RelatedActivityId, acttrace's parent #{o.Parent}");
            string oParent = want == 0 ? "none" : $"#{want}";
            if (tParent != oParent)
            {
                string on = want != 0 && bySerial.TryGetValue(want, out var op) ? $" {op.Name} {op.Path}" : "";
                string how = want == o.Parent ? "" : $", by the thread's current activity; its parent #{o.Parent}";
                d.Add($"parent {tParent} (acttrace {oParent}{on}{how})");
            }
            if (d.Count == 0) agree++;
            else bad.Add($"activity #{o.Serial} {o.Name} {o.Path} at {os:F3} ms: TraceEvent {string.Join(", ", d)}");
        }
        foreach (var o in mine)
            if (!matched.Contains(o))
                bad.Add($"activity #{o.Serial} {o.Name} {o.Path} at {o.StartNs / 1e6:F3} ms: not among TraceEvent's activities");
        bad.AddRange(extra);
        if (bad.Count > 0)
        {
            problems.Add($"{bad.Count} of {mine.Count} activities differ from TraceEvent's StartStopActivityComputer ({theirs.Count}): {string.Join("; ", bad.Take(MaxShown))}");
        }
        return agree;
    }

    static string FirstLine(string s)
    {
        int n = s.IndexOf('\n');
        return n < 0 ? s : s.Substring(0, n).TrimEnd('\r');
    }
}
