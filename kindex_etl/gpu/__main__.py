from kindex_etl.gpu.command import main

raise SystemExit(main())
